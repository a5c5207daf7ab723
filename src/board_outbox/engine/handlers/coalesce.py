"""Coalescing per (subscription, card) (issue 33, item 2): whether a launch row runs or is
superseded by a newer row of its burst.

The rule, for a claimed launch row R of a coalescing subscription (born due ``quiet_seconds``
after it was materialized; ``burst_at``: when its burst began, born ``created_at``), with N the
newest row of the same (tenant, subscription, card) newer than R that is pending, claimed or done
(one query over a partial index that holds only coalescing rows):

- no N: R launches (no matching edit of the card since R's, for the quiet time at least);
- N done: R is superseded by N (N ran after R's edit, with a newer snapshot);
- N claimed (running now): R waits a moment (the defer transition, attempts unchanged, no error)
  and asks again -- N's fate decides R's;
- N pending, R's burst younger than ``max_wait_seconds`` (``now < burst_at + max_wait``): N takes
  the burst over (``carry_burst``: its ``burst_at`` lowered to R's, its due time to the burst's
  deadline at the latest; fenced on N still pending, else R waits a moment), and R is superseded;
- N pending, the burst's deadline passed: R launches, and the newer pending or claimed rows
  begin the next burst (``restart_burst`` raises their ``burst_at`` to now: the burst a row is in
  is ``min(burst_at, created_at)``, so each begins at its own edit again and the edits R did not
  cover wait at most max wait from their own), so a continuous stream launches about once per
  max wait. (A row claimed before that restart re-reads its own ``burst_at`` before it launches
  at a deadline: within one worker, whose lane runs a tenant's rows one at a time, a burst
  launches once; two replicas deciding two rows of one card at the same instant can both
  launch -- the cost of deciding without a lock.)

Superseded: ``Superseded(N)``; the worker applies the ``coalesce`` transition (fenced on R's
claim like every mark). Waiting: ``CoalesceHold``."""

from __future__ import annotations

from board_outbox.model.domain import CLAIMED, PENDING, Coalesce, EffectRow
from board_outbox.model.errors import CoalesceHold, Superseded
from board_outbox.ports import EffectOutbox

# how long a row waits for a running newer row of its burst before it asks again (seconds; the
# quiet time when that is shorter)
HOLD_SECONDS = 1.0


async def coalesce_check(row: EffectRow, window: Coalesce, outbox: EffectOutbox,
                         now: float) -> None:
    """Return when ``row`` should launch; raise ``Superseded`` or ``CoalesceHold``."""
    assert row.event is not None and row.sub_id is not None and row.burst_at is not None
    tenant, sub_id, card = row.tenant_id, row.sub_id, row.event.card_id
    if row.burst_closed:  # the row its burst's deadline chose: it launches, the newer ones
        # begin the next burst, each at its own edit
        await outbox.restart_burst(tenant, sub_id, card, row.seq, at=now)
        return
    hold = min(HOLD_SECONDS, window.quiet_seconds)
    covered = await outbox.covered_in_burst(tenant, sub_id, card, row.seq)
    if covered is not None:  # a newer row ran, or launches whatever is newer: it covers this one
        if covered.state == CLAIMED:
            raise CoalesceHold(f"coalescing: the newer row {covered.row_key} is running", hold)
        raise Superseded(covered.row_key)
    newest = await outbox.newest_in_burst(tenant, sub_id, card, row.seq)
    if newest is None:
        return
    if newest.state != PENDING:  # running now (a done one would have covered this row)
        raise CoalesceHold(f"coalescing: the newer row {newest.row_key} is running", hold)
    burst = min(row.burst_at, row.created_at)
    deadline = burst + window.max_wait_seconds
    close = now >= deadline  # past the deadline: the newest row is chosen, due at once
    if await outbox.carry_burst(newest.row_key, burst_at=burst, due_by=now if close else deadline,
                                now=now, close=close):
        raise Superseded(newest.row_key)
    raise CoalesceHold(f"coalescing: the newer row {newest.row_key} was claimed meanwhile", hold)
