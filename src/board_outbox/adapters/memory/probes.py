"""Named fault points a memory twin passes (``changefeed.next``, ``launcher.launch[.after]``).

The twins only call ``hit``; tests plug in their own injector (tests/support/faults.py), and
faults at any port call come from wrapping the ports from outside (``FaultProxy``)."""

from __future__ import annotations

from typing import Protocol


class FaultPoints(Protocol):
    def hit(self, point: str) -> None: ...


class NoFaults:
    """The default: every point passes."""

    def hit(self, point: str) -> None:
        return None
