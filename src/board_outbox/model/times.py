"""Stored times at the boundary (SPEC R7): the one range a stored time must fall in, the type a
document's time fields decode into, and the one guarded way every surface writes a time for a
person.

A stored time is epoch seconds: a finite number (int, BSON Int64 or float) from
``TIME_MIN`` (1970-01-01T00:00:00Z) to ``TIME_MAX`` (9999-12-31T23:59:59Z). That range is what
a sane time is against any server clock: every time the service stores was read from a wall
clock, and wall clocks read after 1970; no date can show a year after 9999; and a millisecond
timestamp of any moment since 1978 -- a JavaScript ``Date.now()`` (about 1.7e12), or ``1e12`` --
lies beyond it, as do the infinities, NaN, ``1e20`` and ``-1e308``. A field typed ``Stamp``
refuses any other value when its document is decoded, so the document is malformed -- that
document alone, never the read it was part of.

Pure: no clock is read here (the caller passes ``now`` where it matters).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Final

import msgspec

__all__ = ["DUE_MARGIN_SECONDS", "HELD_OFFSET", "TIME_MAX", "TIME_MIN", "Stamp", "ago",
           "due_limit", "stamp", "time_problem", "when"]

TIME_MIN: Final = 0.0  # 1970-01-01T00:00:00Z
TIME_MAX: Final = 253402300799.0  # 9999-12-31T23:59:59Z
RANGE: Final = "epoch seconds from 1970-01-01 to 9999-12-31 UTC"

# A held row's not_before is its own plus this (2**33 s, about 272 years): no clock reaches it,
# so no claim picks the row, and taking it off again gives back the very order the rows had
# (F3, ``model/pause``).
HELD_OFFSET: Final = float(2**33)
# How far past the reading clock (beyond a pause's offset) a due time may lie: the longest a
# writer of ours sets one ahead (a backoff, a coalescing window: at most a day each) and a day
# of clock skew between replicas.
DUE_MARGIN_SECONDS: Final = 2 * 86400.0

# A stored time: a document whose field holds anything else does not decode (NaN fails both
# bounds, an infinity one; a bool is not a number to msgspec).
Stamp = Annotated[float, msgspec.Meta(ge=TIME_MIN, le=TIME_MAX)]


def stamp(value: object) -> float | None:
    """``value`` as a float when it is a time in range (an int or float, not a bool), else
    None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        t = float(value)
    except OverflowError:  # an int beyond any float
        return None
    return t if TIME_MIN <= t <= TIME_MAX else None


def time_problem(name: str, value: object) -> str | None:
    """Why ``value`` is not a stored time (None: it is one), in one line naming ``name``."""
    if stamp(value) is not None:
        return None
    shown = _shown(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{name} {shown} is not a number of seconds ({RANGE})"
    t = float(value) if not isinstance(value, int) or abs(value) < 10**300 else math.inf
    hint = "; a millisecond timestamp?" if TIME_MAX < t <= TIME_MAX * 1000 else ""
    return f"{name} {shown} is out of range ({RANGE}{hint})"


def _shown(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        return f"{float(value):.3g}" if abs(value) < 10**300 else "beyond 10^300"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def due_limit(now: float) -> float:
    """The furthest due time (``not_before``) a pending row may have at ``now``: held by a pause
    and due a day and more after that. A row due later can be no writer's: it would wait for
    centuries unseen, so the stuck-row sweep parks it (R7)."""
    return now + HELD_OFFSET + DUE_MARGIN_SECONDS


def when(t: object, *, fmt: str = "%Y-%m-%d %H:%M:%S UTC", ms: bool = False,
         none: str = "-") -> str:
    """A stored time for a person, in UTC: every surface writes times through this. None is
    ``none``; a value outside the range is written as what it is (``out of range: 1e+20``),
    never raised: a page or a command shows the rest."""
    if t is None:
        return none
    s = stamp(t)
    if s is None:
        return f"out of range: {_shown(t)}"
    dt = datetime.fromtimestamp(s, UTC)
    text = dt.strftime(fmt.replace("%f", f"{dt.microsecond // 1000:03d}" if ms else "%f"))
    return text


def ago(now: float, t: object) -> float | None:
    """How long before ``now`` the stored time ``t`` was (negative: ahead of this clock); None
    when ``t`` is not a time in range, so no age is made up from it."""
    s = stamp(t)
    return None if s is None else now - s
