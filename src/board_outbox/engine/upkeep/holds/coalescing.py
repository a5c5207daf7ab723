"""Coalescing: a row superseded by a newer one of its (subscription, card), followed along the
chain to the row that runs for them all; a row in its card's quiet window."""

from __future__ import annotations

from board_outbox.engine.upkeep.holds.case import Case, from_now
from board_outbox.model.errors import MalformedDocument
from board_outbox.model.explanation import Coalesced, Coalescing, Hold
from board_outbox.model.retention import days
from board_outbox.model.rows import COALESCED, DONE, FAILED, LIVE_STATES, PENDING, EffectRow


async def coalesced(c: Case) -> list[Hold]:
    """Superseded by a newer row of its (subscription, card); that row may have been superseded
    in turn (edits a little apart: 1 and 2 into 7, 7 into 8), so the chain of
    ``coalesced_into`` is followed, one read a row, to the row that runs for them all --
    at most ``CHAIN_LIMIT`` rows, and a loop, a row gone or one that does not decode is said,
    never followed."""
    r = c.row
    if r.state != COALESCED:
        return []
    at = r.done_at.timestamp() if r.done_at is not None else None
    if r.coalesced_into is None:
        return [Coalesced(summary="coalesced, but the row names no row that covers it",
                          into=None, at=at, problem="no coalesced_into")]
    chain, end, problem = await _chain(c, r.coalesced_into)
    head = f"coalesced into {r.coalesced_into}" + (
        f", itself superseded: {' -> '.join(chain[1:])}" if len(chain) > 1 else "")
    last = chain[-1]
    if problem is not None:
        tail = problem
    elif end is None:  # unreachable: a chain without a problem ends at a row read
        tail = "its end was not read"
    elif end.state == DONE:
        tail = (f"{last} ran instead ({end.outcome or 'no outcome recorded'})" if len(chain) > 1
                else f"that newer row of the same (subscription, card) ran instead "
                     f"({end.outcome or 'no outcome recorded'})")
    elif end.state in LIVE_STATES:
        tail = f"{last}, the newest of its card's burst, has not run yet ({end.state}): it runs for them all"
    elif end.state == FAILED:
        tail = (f"{last} was dead-lettered: none of them has run (`board-outbox dead-letters "
                f"replay {last}` runs it for them all)")
    else:
        tail = f"{last} is {end.state}"
    return [Coalesced(summary=f"{head}: {tail}", into=r.coalesced_into, at=at, chain=chain,
                      end_state=None if end is None else end.state,
                      ran=last if end is not None and end.state == DONE and problem is None
                      else None, problem=problem)]


# rows of a coalescing chain followed at most (a burst's rows are spread over its window at
# most; a longer chain is a loop or a planted one)
CHAIN_LIMIT = 32


async def _chain(c: Case, first: str) -> tuple[list[str], EffectRow | None, str | None]:
    """The chain from ``first`` to its end: (keys, the last row read, why it stopped early)."""
    chain = [first]
    seen = {c.row.row_key}
    key = first
    while True:
        if key in seen:
            return chain, None, (f"the chain loops back to {key}: a planted or broken document; "
                                 "none of it can be said to have run")
        seen.add(key)
        try:
            row = await c.stores.outbox.get(key)
        except MalformedDocument as exc:
            return chain, None, f"{key} does not decode ({exc.detail}): the chain stops there"
        if row is None:
            kept = c.settings.retention
            return chain, None, (f"{key} is gone (a done row is deleted "
                                 f"{days(kept.done_seconds)}, a coalesced one "
                                 f"{days(kept.coalesced_seconds)}, once settled): the chain "
                                 "stops there")
        if row.state != COALESCED or row.coalesced_into is None:
            return chain, row, None
        if len(chain) >= CHAIN_LIMIT:
            return chain, row, f"the chain is longer than {CHAIN_LIMIT} rows: followed that far"
        key = row.coalesced_into
        chain.append(key)


async def coalescing(c: Case) -> list[Hold]:
    """A coalescing row in its card's quiet window (not yet due, never failed)."""
    r = c.row
    if (r.state != PENDING or r.burst_at is None or r.not_before <= c.now or r.errors
            or r.attempts or r.waiting):
        return []
    return [Coalescing(summary=(f"coalescing: its card's quiet window ends {from_now(r.not_before - c.now)}"
                                f"; it launches then unless a newer row of its (subscription, card) "
                                f"supersedes it (its burst began {from_now(r.burst_at - c.now)})"),
                       until=r.not_before, burst_at=r.burst_at)]
