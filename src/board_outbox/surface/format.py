"""How the operator surfaces (the CLI's tables, the console's pages) write values for a person."""

from __future__ import annotations


def age(seconds: float | None, *, days: bool = False) -> str:
    """A duration for a person: ``-`` for none, then seconds, minutes, hours (and, with ``days``,
    days past 48 h). The status table and the console both show ages this way."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if not days or seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"
