"""How long settled rows are kept (O8): one setting per terminal state, the ``[retention]``
configuration section. The store's TTL indexes follow it (``adapters/mongo/schema``), and the
completeness audit and the replays read it to tell a row that expired from one that is missing.

A leaf: plain values, no I/O."""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

__all__ = ["DAY", "MAX_RETENTION_SECONDS", "MIN_RETENTION_SECONDS", "Retention", "days"]

DAY: Final = 86400
# below an hour a row is gone before anyone can look at it (the server's TTL monitor runs every
# minute anyway); above MongoDB's own bound for ``expireAfterSeconds`` (about 68 years) the
# server refuses the index
MIN_RETENTION_SECONDS: Final = 3600
MAX_RETENTION_SECONDS: Final = 2**31 - 1

Kept = Annotated[int, msgspec.Meta(ge=MIN_RETENTION_SECONDS, le=MAX_RETENTION_SECONDS)]
# 0: never expires; else as ``Kept`` (checked in ``Retention.__post_init__``: one bound each side)
KeptOrForever = Annotated[int, msgspec.Meta(ge=0, le=MAX_RETENTION_SECONDS)]


class Retention(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Seconds a row is kept after it settles, per terminal state. ``done``, ``coalesced`` and
    ``cancelled`` rows expire (after ``done_at``); dead-letters (``failed``) are kept until an operator
    replays or purges them unless ``failed_seconds`` is set (after ``failed_at``, the time the
    row was parked; a row parked by a version that did not write it never expires)."""

    done_seconds: Kept = 7 * DAY
    coalesced_seconds: Kept = 7 * DAY
    cancelled_seconds: Kept = 7 * DAY  # A8: rows an operator cancelled, after ``done_at``
    failed_seconds: KeptOrForever = 0

    def __post_init__(self) -> None:
        if 0 < self.failed_seconds < MIN_RETENTION_SECONDS:
            raise ValueError(f"failed_seconds {self.failed_seconds}: 0 (dead-letters are kept "
                             f"until replayed or purged) or at least {MIN_RETENTION_SECONDS}")

    def horizon(self) -> float:
        """The shortest time a settled row is kept: a row owed for an event older than this
        may have run and expired, so it is never called missing (the audit) nor written again
        (a replay)."""
        kept = [self.done_seconds, self.coalesced_seconds, self.cancelled_seconds]
        if self.failed_seconds:
            kept.append(self.failed_seconds)
        return float(min(kept))

    def by_state(self) -> dict[str, int]:
        """Terminal state -> seconds kept (0: forever)."""
        return {"done": self.done_seconds, "coalesced": self.coalesced_seconds,
                "cancelled": self.cancelled_seconds, "failed": self.failed_seconds}


def days(seconds: float) -> str:
    """A retention in words: "after 7 days", "after 36 hours", "never"."""
    if seconds <= 0:
        return "never"
    if seconds % DAY == 0:
        n = int(seconds // DAY)
        return f"after {n} day{'s' if n != 1 else ''}"
    hours = seconds / 3600
    return f"after {hours:g} hour{'s' if hours != 1 else ''}"
