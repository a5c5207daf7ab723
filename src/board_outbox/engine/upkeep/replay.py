"""Replaying a tenant's range under the CURRENT rules (A4): which rows would the tail write for
the events in ``[since, cursor]`` if it materialized them today (today's subscriptions, today's
projections, today's cards), and what is already stored under those row keys.

Every planned row gets one action:

- ``fire``: no row with its key is stored, and its event is younger than the done TTL: the
  replay writes it (pending) and a worker runs it;
- ``queued``: a pending or claimed row already has the key: it runs anyway, nothing is written;
- ``done``: the row already ran: it is never run again by a replay;
- ``dead-letter``: the row is parked: ``dead-letters replay`` is the way to run it again;
- ``maybe-expired``: no row is stored, but the event is older than the done TTL, so the row may
  have run and been deleted by the TTL: a replay never re-creates it (it could run twice).

The write is the tail's: rows built by ``Tail.build_rows``, one ``$setOnInsert`` bulk upsert
keyed by row key per chunk, so a replay run twice, or racing the tail, writes each row once.
A dry run reads only.
"""

from __future__ import annotations

import logging

import msgspec
from opentelemetry import trace

from board_outbox.engine.tail.tail import Tail
from board_outbox.engine.upkeep.audit import passed_chunks
from board_outbox.model.ids import PROJECTION
from board_outbox.model.rows import DONE_TTL_SECONDS, FAILED, LIVE_STATES
from board_outbox.model.subscriptions import SubscriptionIndex
from board_outbox.model.validation import is_seq

log = logging.getLogger("board_outbox.replay")

SPAN_REPLAY = "board_outbox.replay"


class PlannedRow(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    row_key: str
    kind: str
    target: str  # "bot <bot> (subscription <sub_id>)" or "projection <name>"
    action: str  # fire | queued | done | dead-letter | maybe-expired


class ReplayPlan(msgspec.Struct, kw_only=True):
    tenant_id: str
    since: int
    upto: int  # the cursor: later events are the tail's to materialize
    dry_run: bool
    events: int = 0
    rows: list[PlannedRow] = msgspec.field(default_factory=list)
    written: int = 0  # rows this replay inserted (0 in a dry run)

    def count(self, action: str) -> int:
        return sum(1 for r in self.rows if r.action == action)


async def replay_range(tail: Tail, tenant_id: str, *, since: int, subscription: str | None = None,
                       dry_run: bool = True, batch_size: int = 500,
                       retention_seconds: float = float(DONE_TTL_SECONDS),
                       tracer_provider: trace.TracerProvider | None = None) -> ReplayPlan:
    """Plan (and unless ``dry_run``, write) the rows for events ``since..cursor`` under the
    current rules; with ``subscription``, only that subscription's launch rows. A row not stored
    whose event is older than ``retention_seconds`` (the shortest retention, O8) may have run
    and expired: it is planned as ``maybe-expired`` and never written."""
    subs = await tail.subs.list_for_tenant(tenant_id)
    if subscription is not None:
        subs = [s for s in subs if s.sub_id == subscription]  # none: nothing to replay
    index = SubscriptionIndex(subs)
    bots = {s.sub_id: s.bot for s in subs}
    cursor = await tail.cursors.get(tenant_id)
    cursor = cursor if cursor is not None and is_seq(cursor) else 0
    plan = ReplayPlan(tenant_id=tenant_id, since=since, upto=cursor, dry_run=dry_run)
    tracer = trace.get_tracer("board_outbox.replay", tracer_provider=tracer_provider)
    async for chunk in passed_chunks(tail, tenant_id, after=max(0, since - 1), cursor=cursor,
                                     batch_size=batch_size):
        plan.events += len(chunk.passed)
        snaps = [snap for _, snap in chunk.passed if snap is not None]
        with tracer.start_as_current_span(SPAN_REPLAY, attributes={
                "board_outbox.tenant_id": tenant_id, "board_outbox.dry_run": dry_run}) as span:
            rows = tail.build_rows(tenant_id, snaps, index, chunk.now, span)
            if subscription is not None:
                rows = [r for r in rows if r.kind != PROJECTION]
            stored = {r.row_key: r.state for r in
                      await tail.outbox.rows_between(tenant_id, chunk.lo, chunk.hi)}
            at = {s.seq: s.at for s in snaps}
            fire = []
            for row in rows:
                state = stored.get(row.row_key)
                if state is None:
                    old = at[row.seq] <= 0 or chunk.now - at[row.seq] >= retention_seconds
                    action = "maybe-expired" if old else "fire"
                elif state in LIVE_STATES:
                    action = "queued"
                elif state == FAILED:
                    action = "dead-letter"
                else:
                    action = "done"
                target = (f"projection {row.projection}" if row.kind == PROJECTION
                          else f"bot {bots.get(row.sub_id or '', '?')} (subscription {row.sub_id})")
                plan.rows.append(PlannedRow(seq=row.seq, row_key=row.row_key, kind=row.kind,
                                            target=target, action=action))
                if action == "fire":
                    fire.append(row)
            if fire and not dry_run:
                result = await tail.outbox.upsert_rows(fire)
                plan.written += result.inserted
    if plan.written:
        log.warning("replay wrote %d rows for seqs %d..%d", plan.written, since, cursor,
                    extra={"tenant_id": tenant_id})
    return plan
