"""How the operator surfaces (the CLI's tables, the console's pages) write values for a person.
Times go through ``model/times.when`` (R7: a stored time out of range is written as what it is,
never raised); durations through ``age``."""

from __future__ import annotations

import math

from board_outbox.model.times import TIME_MAX
from board_outbox.model.times import when as when

__all__ = ["age", "when"]


def age(seconds: float | None, *, days: bool = False) -> str:
    """A duration for a person: ``-`` for none, then seconds, minutes, hours (and, with ``days``,
    days past 48 h). The status table and the console both show ages this way."""
    if seconds is None:
        return "-"
    if not math.isfinite(seconds) or abs(seconds) > TIME_MAX:  # no two times in range are
        return "?"  # that far apart (R7): an age from a time out of range, never "infh"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if not days or seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"
