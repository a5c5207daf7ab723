"""Who claims a due row and when its turn comes: its tenant's live owner (S1) and the tenant's
due rows ahead of it."""

from __future__ import annotations

from board_outbox.engine.flow.membership import owner, trusted
from board_outbox.engine.upkeep.holds.case import Case, from_now
from board_outbox.model.explanation import Hold, Ownership, Turn
from board_outbox.model.rows import PENDING

# the tenant's due rows counted ahead of a row, at most (one count stopped there)
TURN_LIMIT = 1000


async def ownership(c: Case) -> list[Hold]:
    """Who claims the due row: the live owner of its tenant first (S1)."""
    r, ms = c.row, c.settings.membership
    if r.state != PENDING or r.not_before > c.now:
        return []
    members = c.stores.members
    if members is None or not ms.enabled:
        c.notes.append("membership is off: any replica claims any tenant's rows")
        return []
    live = [m.member_id for m in trusted(await members.live(c.now), c.now, ms)]
    if not live:
        return [Ownership(summary="no replica is alive (no live lease in the membership "
                                  "store): nothing claims it until one runs",
                          owner=None, replicas=0)]
    who = owner(live, r.tenant_id)
    if len(live) == 1:
        return [Ownership(summary=f"tenant {r.tenant_id} is owned by {who}, the only live "
                                  "replica", owner=who, replicas=1)]
    steal_at = r.created_at + c.settings.worker.steal_after_seconds
    if steal_at > c.now:
        text = (f"only its owner claims it until {from_now(steal_at - c.now)}, then any replica")
    else:
        text = "materialized long enough ago that any replica may take it"
    return [Ownership(summary=f"tenant {r.tenant_id} is owned by {who} (of {len(live)} live "
                              f"replicas): {text}", owner=who, replicas=len(live),
                      steal_at=steal_at)]


async def turn(c: Case) -> list[Hold]:
    """Due: its place among the tenant's due rows (claims take each tenant's oldest due first)."""
    r = c.row
    if r.state != PENDING or r.not_before > c.now:
        return []
    ahead = await c.stores.outbox.due_ahead(r.tenant_id, r.not_before, r.seq, TURN_LIMIT)
    capped = ahead >= TURN_LIMIT
    where = ("first in line: the next claim of its tenant takes it" if not ahead else
             f"{'at least ' if capped else ''}{ahead} of its tenant's due rows are ahead of it")
    return [Turn(summary=f"due {from_now(r.not_before - c.now)}; {where}", due_since=r.not_before,
                 ahead=ahead, ahead_at_least=capped)]
