"""Deliberately broken pipelines: the harness must catch each of them (or it proves nothing)."""

from __future__ import annotations

from opentelemetry import trace

from board_outbox.domain import SubscriptionIndex
from board_outbox.errors import CardNotFound
from board_outbox.reading import card_ids, decode_event, snapshot
from board_outbox.tail import DrainResult, Tail


class CursorFirstTail(Tail):
    """The shape ADR-094 replaced: advance the cursor, then write the rows. A crash between the
    two loses the batch for good."""

    async def _drain(self, tenant_id: str, res: DrainResult, span: trace.Span) -> None:
        cursor = await self.cursor(tenant_id)
        records = await self.events.read_after(tenant_id, cursor, self.settings.batch_size)
        res.read = len(records)
        if not records:
            return
        if not await self.cursors.compare_and_set(tenant_id, cursor, records[-1].seq):
            return
        evs = []
        for rec in records:
            try:
                evs.append(decode_event(tenant_id, rec))
            except Exception:
                continue
        cards = await self.cards.get_many(tenant_id, card_ids(evs))
        snaps = []
        for ev in evs:
            try:
                snaps.append(snapshot(ev, cards))
            except (CardNotFound, Exception):
                continue
        index = SubscriptionIndex(await self.subs.list_for_tenant(tenant_id))
        rows = self.build_rows(tenant_id, snaps, index, self.clock.now(), span)
        if rows:
            await self.outbox.upsert_rows(rows)
