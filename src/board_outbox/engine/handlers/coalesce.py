"""Coalescing per (subscription, card), so a burst of edits launches once: whether a launch row runs or is
superseded by a newer row of its burst.

A coalescing subscription's rows are born due ``quiet_seconds`` after their materialization,
with ``burst_at`` (when their burst began) = ``created_at``; the burst a row is in began at
``min(burst_at, created_at)``. The rule, for a claimed row R (each store read is one indexed
query over the partial index that holds only coalescing rows, one document back):

1. R's burst is closed (``burst_closed``: the deadline chose it): R launches, whatever is newer;
   the newer rows begin the next burst (``restart_burst``: their ``burst_at`` raised to now, so
   each counts from its own edit again).
2. A newer row covers R (``covered_in_burst``): done -- it ran after R's edit, with a newer
   snapshot -- or with its burst closed: R is superseded by it (claimed: R waits a moment).
3. No newer row pending, claimed or done (``newest_in_burst``): R launches.
4. The newest row N is running: R waits a moment (``CoalesceHold``) -- N's fate decides R's.
5. N is pending: N takes R's burst over (``carry_burst``, fenced on N still pending, else R
   waits a moment: N's ``burst_at`` lowered to R's burst start, its due time to the burst's
   deadline ``+ max_wait_seconds`` at the latest), and R is superseded by N. Past the deadline
   N is also due at once and its burst closed (rule 1), so a stream faster than the claims
   cannot push the launch out.

Superseded: ``Superseded(N)``; the worker applies the ``coalesce`` transition (fenced on R's
claim like every mark). Waiting: ``CoalesceHold`` (the ``coalesce_hold`` transition). Across
replicas these are writes fenced on a row's state, not a lock: two replicas deciding two rows of
one card at the same instant can both launch (docs/design.md, "Coalescing per card")."""

from __future__ import annotations

from board_outbox.model.errors import CoalesceHold, Superseded
from board_outbox.model.rows import CLAIMED, PENDING, EffectRow
from board_outbox.model.subscriptions import Coalesce
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
