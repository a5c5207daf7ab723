"""board-reflect (ADR-097 §10): a per-tenant read model of the board's cards.

Each card document holds the card as of the newest event applied to it (title, column,
labels, deleted) and that event's seq. Rows execute in any order and may repeat: the store's
seq guard makes a stale or repeated event a no-op, so the read model converges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from board_outbox.sdk import EventSnapshot, ReadModelStore, UpsertIfNewer

APPLIED = "applied"
STALE = "stale (newer event already applied)"
SUPERSEDED = "superseded (a newer event of the card was in the same batch)"


def _doc(event: EventSnapshot) -> dict[str, Any]:
    return {
        "card_id": event.card_id,
        "title": event.title,
        "column": event.column,
        "labels": list(event.labels),
        "deleted": event.deleted,
        "last_type": event.type,
    }


class BoardReflect:
    name: ClassVar[str] = "board-reflect"

    def __init__(self, store: ReadModelStore) -> None:
        self.store = store

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        fresh = await self.store.upsert_if_newer(self.name, tenant_id, event.card_id, event.seq,
                                                 _doc(event))
        return APPLIED if fresh else STALE

    async def apply_many(self, tenant_id: str, events: Sequence[EventSnapshot]) -> list[str]:
        """One bulk write for a batch: per card only its newest event is written (the others
        would be overwritten by it anyway); one outcome per event, in order."""
        newest: dict[str, EventSnapshot] = {}
        for ev in events:
            if ev.card_id not in newest or ev.seq > newest[ev.card_id].seq:
                newest[ev.card_id] = ev
        winners = list(newest.values())
        fresh = await self.store.write_many(self.name, tenant_id, [
            UpsertIfNewer(key=ev.card_id, seq=ev.seq, doc=_doc(ev)) for ev in winners
        ])
        outcome = {ev.seq: APPLIED if ok else STALE for ev, ok in zip(winners, fresh, strict=True)}
        # few distinct labels: the worker marks a batch with one fenced write per label
        return [outcome.get(ev.seq, STALE) if newest[ev.card_id] is ev else SUPERSEDED
                for ev in events]

    async def reset(self, tenant_id: str) -> None:
        await self.store.reset(self.name, tenant_id)

    async def cards(self, tenant_id: str) -> list[dict[str, Any]]:
        return await self.store.list(self.name, tenant_id)
