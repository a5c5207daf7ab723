"""The operators' bulk actions beside the dead-letters' replay (A8): cancel pending rows (and,
asked to, claimed rows whose lease expired), rerun done ones. Each is a plan
(``engine.upkeep.bulk_replay.plan_bulk_replay`` over the filter's state) and an apply
(``apply_bulk``: rate-limited, abortable between two rows, one summary line), with its own
one-row write here.

- **cancel**: the ``cancel`` transition, fenced on ``{row_key, state: pending, updated_at as
  read}`` (``EffectOutbox.apply_unclaimed``). A row a replica claimed a moment before is claimed,
  not pending: the cancel skips it and the replica runs it. A row cancelled first is no longer
  pending: no claim takes it, so it is never launched. The fence decides, whatever the timing.
  With ``include_expired``, a claimed row whose lease had ended when read is cancelled the same
  way, fenced on ``{row_key, state: claimed, updated_at as read}``: every heartbeat
  (``extend_lease``) and every reclaim moves ``updated_at``, so a holder that beat since the
  read, or a replica that reclaimed the row, wins and the cancel skips it; and since
  ``lease_until`` never moves without ``updated_at``, the lease the walk saw ended is still
  ended. The cancel clears ``claim_id``: the old holder's mark (fenced on its claim and the
  claimed state) is refused. Its holder is presumed dead, as by a reclaim; a launch already
  under way in a holder alive but stalled cannot be recalled (only its mark is refused).
- **rerun**: a new pending row that copies the done row's event and target, keyed
  ``ROW_KEY/rerun/N`` (``row_keys.rerun_row_key``: the bot sees a new Idempotency-Key) and
  carrying ``rerun_of``; then the done row's ``rerun_noted`` (its history says so), fenced on
  its ``updated_at`` as read. N is one more than the reruns the row's history names, so every
  apply of one plan -- concurrent, or after a crash between the two writes -- writes the same key,
  and the unique row key collapses them: one rerun per planned row. A new plan leaves out the
  rows re-run already (``dead_letters.already_rerun``: noted, or a rerun themselves) unless
  ``include_rerun``: the same command repeated after a kill midway re-runs only the rows the
  killed apply did not note (its row whose new row is in and whose note is not gets the same key
  again, and its note)."""

from __future__ import annotations

import math

from board_outbox.engine.upkeep.bulk_replay import RowWrite, replay_write
from board_outbox.model import transitions as T
from board_outbox.model.clock import Clock
from board_outbox.model.dead_letters import CANCEL, REPLAY, lease_expired
from board_outbox.model.row_keys import rerun_row_key
from board_outbox.model.rows import CLAIMED, DONE, PENDING, AuditEntry, EffectRow
from board_outbox.ports import EffectOutbox

__all__ = ["cancel_write", "rerun_row", "rerun_write", "write_of"]


def cancel_write(outbox: EffectOutbox, *, bulk_id: str, by: str, why: str,
                 clock: Clock) -> RowWrite:
    """One fenced cancel of a pending row, or of a claimed row whose lease has ended, as read;
    audited as this bulk cancel's. A claimed row under a live lease is never written."""
    detail = f"{why} (bulk cancel {bulk_id})"

    async def cancel(row: EffectRow) -> bool:
        now = clock.now()
        if row.state == CLAIMED and not lease_expired(row, now):
            return False
        t = T.cancel(now=now, by=by, why=detail)
        return await outbox.apply_unclaimed(row.row_key, t,
                                            state=CLAIMED if row.state == CLAIMED else PENDING,
                                            updated_at=row.updated_at)

    return cancel


def rerun_row(row: EffectRow, *, now: float, by: str, detail: str) -> EffectRow:
    """The new row that re-runs the done row ``row``: its event, target, kind and priority, due
    now, attempts 0, ``rerun_of`` naming it, its own audit entry."""
    n = 1 + sum(1 for a in row.audit if a.action == T.RERUN_NOTE)
    return EffectRow(
        tenant_id=row.tenant_id, row_key=rerun_row_key(row.row_key, n), seq=row.seq,
        kind=row.kind, sub_id=row.sub_id, projection=row.projection, event=row.event,
        priority=row.priority, trace=row.trace, not_before=now, created_at=now,
        updated_at=now, materialized_at=now, rerun_of=row.row_key,
        audit=[AuditEntry(at=now, action="rerun_of", by=by,
                          detail=f"re-run of {row.row_key} ({detail})")])


def rerun_write(outbox: EffectOutbox, *, bulk_id: str, by: str, clock: Clock) -> RowWrite:
    """One rerun of a done row: the new row (inserted unless its key is stored), then the done
    row's note, fenced on its ``updated_at`` as read (False: another apply noted it first)."""
    detail = f"bulk rerun {bulk_id}"

    async def rerun(row: EffectRow) -> bool:
        now = clock.now()
        new = rerun_row(row, now=now, by=by, detail=detail)
        await outbox.upsert_rows([new])
        # the note must move ``updated_at`` (the fence of every other apply), even on a clock
        # that has not moved since the row was done
        noted = max(now, math.nextafter(row.updated_at, math.inf))
        t = T.rerun_noted(now=noted, by=by, rerun_key=new.row_key, detail=detail)
        return await outbox.apply_unclaimed(row.row_key, t, state=DONE,
                                            updated_at=row.updated_at)

    return rerun


def write_of(action: str, outbox: EffectOutbox, *, bulk_id: str, by: str, why: str,
             clock: Clock) -> RowWrite:
    """The one-row write of the bulk ``action`` (replay, cancel -- ``why`` is its reason --
    or rerun)."""
    if action == CANCEL:
        return cancel_write(outbox, bulk_id=bulk_id, by=by, why=why, clock=clock)
    if action == REPLAY:
        return replay_write(outbox, bulk_id=bulk_id, by=by, clock=clock)
    return rerun_write(outbox, bulk_id=bulk_id, by=by, clock=clock)
