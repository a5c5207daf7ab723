"""Deadlines and an eye on the event loop for plugin code (R1).

- ``deadline(seconds, what)``: every plugin call (a handler's ``execute`` and ``prepare``, a
  projection's ``apply`` / ``apply_many``) runs under a cancelling deadline; past it the call is
  cancelled and ``EffectTimeout`` raised, so the attempt counts and the row retries or parks. One
  hung row never stops the other rows or tenants.
- ``LoopWatch``: the worker names each plugin step it starts (``step``); a monitor task sleeps a
  short interval and measures how late it wakes. A late wake means something blocked the event
  loop (a plugin doing blocking I/O, a CPU-bound loop): it is counted, the longest lag kept for
  ``/metrics``, and one warning names the steps that were running while the loop was blocked.
- ``Progress``: when the worker last made progress, for ``/healthz`` (a worker stuck in a step
  that ignores cancellation, while rows are claimed, is not alive).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import anyio

from board_outbox.model.clock import Clock
from board_outbox.model.errors import EffectTimeout

log = logging.getLogger("board_outbox.watchdog")


@contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Cancel the body after ``seconds``; raise ``EffectTimeout`` naming ``what``."""
    try:
        with anyio.fail_after(seconds):
            yield
    except TimeoutError:
        raise EffectTimeout(f"{what} ran past max_execution_seconds ({seconds:g}s) and was "
                            "cancelled") from None


@dataclass
class _Step:
    name: str
    started: float
    ended: float | None = None


class LoopWatch:
    """Names the plugin steps in flight and notices when the event loop was blocked."""

    def __init__(self, clock: Callable[[], float], *, keep: int = 64) -> None:
        self._now = clock
        self._steps: deque[_Step] = deque(maxlen=keep)
        self.stalls = 0  # times the loop was blocked for longer than the threshold
        self.max_lag = 0.0  # the longest block seen (seconds)
        self.last_lag = 0.0

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        s = _Step(name, self._now())
        self._steps.append(s)
        try:
            yield
        finally:
            s.ended = self._now()

    def running_between(self, start: float, end: float) -> list[str]:
        """The steps in flight at some moment of [start, end], longest first."""
        hits = [s for s in self._steps if s.started <= end and (s.ended is None or s.ended >= start)]
        hits.sort(key=lambda s: (s.ended if s.ended is not None else end) - s.started, reverse=True)
        return [s.name for s in hits]

    def observe(self, expected: float, woke: float, threshold: float) -> float:
        """One wake of the monitor: ``expected`` when it asked to wake, ``woke`` when it did.
        Returns the lag; past ``threshold`` it is counted and logged, naming the steps."""
        lag = max(0.0, woke - expected)
        self.last_lag = lag
        if lag > threshold:
            self.stalls += 1
            self.max_lag = max(self.max_lag, lag)
            steps = self.running_between(expected, woke)
            log.warning("event loop blocked for %.2fs (every loop of this replica waited); "
                        "running then: %s", lag, "; ".join(steps[:3]) or "no plugin step (the "
                        "service's own code, or the driver)")
        return lag

    async def monitor(self, *, interval: float = 0.1, threshold: float = 1.0) -> None:
        """Run forever: sleep ``interval``, measure how late the wake was."""
        while True:
            expected = self._now() + interval
            await anyio.sleep(interval)
            self.observe(expected, self._now(), threshold)


class Progress:
    """When the worker last made progress (a row started or finished, a tick ended)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.at = clock.now()
        self.busy = False  # rows claimed and not all finished

    def beat(self) -> None:
        self.at = self.clock.now()

    def stuck_for(self) -> float:
        """Seconds without progress while rows are claimed (0: not busy)."""
        return max(0.0, self.clock.now() - self.at) if self.busy else 0.0
