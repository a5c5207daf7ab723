"""Concurrency and rate limits (F2): the keys a launch is counted under, and how a rate is
counted in whole-second windows. Pure; the ``LimitStore`` adapters and the launch gate share it.

A rate of R launches per second is counted per window of ``W`` whole seconds (``W = 1`` for
R >= 1, else the smallest W with R * W >= 1: 0.5/s is one launch per 2 s), allowing
``floor(R * W)`` launches in each. A fractional rate above 1 is rounded down (2.5/s allows 2
in each second): the limit is never exceeded, only under-used.
"""

from __future__ import annotations

import math
import re

# the slowest positive rate: one launch per 1000 s (a longer window is a typo, or a job for a
# scheduler rather than a limit)
MIN_RATE = 0.001
EPS = 1e-9
# a counter or slot document outlives its use by this much before the TTL index removes it
EXPIRY_MARGIN_SECONDS = 60.0


def bot_key(tenant_id: str, bot: str) -> str:
    """A bot's limits are the tenant's bot's: another tenant's bot of the same name is another
    bot (no tenant can use up another's capacity)."""
    return f"bot:{tenant_id}/{bot}"


def tenant_key(tenant_id: str) -> str:
    return f"tenant:{tenant_id}"


def rate_problem(per_second: float) -> str | None:
    """Why a rate cannot be used (None: it can). 0 means no limit."""
    if per_second != 0 and per_second < MIN_RATE:
        return f"{per_second:g} per second is below the slowest rate, {MIN_RATE:g} (0: no limit)"
    return None


def rate_window(per_second: float) -> tuple[int, int]:
    """(window length in whole seconds, launches allowed in one window) for a positive rate."""
    if per_second >= 1:
        return 1, math.floor(per_second + EPS)
    window = math.ceil(1 / per_second - EPS)
    return window, max(1, math.floor(per_second * window + EPS))


def rate_slot(key: str, per_second: float, now: float) -> tuple[str, int, float]:
    """The counter a launch at ``now`` is counted in: (its id, the launches it allows, the end
    of its window). The id names the window length, so a changed rate counts afresh."""
    window, allowed = rate_window(per_second)
    start = math.floor(now / window) * window
    return f"{key}@{window}:{start}", allowed, float(start + window)


def slot_id(key: str, k: int) -> str:
    """The k-th in-flight slot of ``key`` (k < the limit)."""
    return f"{key}#{k}"


# ``OverLimit.reason`` (model/errors.py), as ``transitions.defer`` stores it in a row's ``waiting``
_WAITING = re.compile(r"(bot|tenant) limit \((in_flight|per_second)\) of (.+)")


def parse_waiting(waiting: str) -> tuple[str, str, str] | None:
    """(scope, kind, key) of the limit a deferred row waited on, read from its ``waiting``
    (``OverLimit.reason``: "bot limit (in_flight) of bot:acme/triage"); None: not that form (a
    capped or hand-edited text)."""
    m = _WAITING.fullmatch(waiting)
    return None if m is None else (m.group(1), m.group(2), m.group(3))
