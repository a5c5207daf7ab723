"""board-reflect (ADR-097 §10): a per-tenant read model of the board's cards.

Each card document holds the card as of the newest event applied to it (title, column,
labels, deleted) and that event's seq. Rows execute in any order and may repeat: the store's
seq guard makes a stale or repeated event a no-op, so the read model converges.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..domain import EventSnapshot
from ..ports import ReadModelStore


class BoardReflect:
    name: ClassVar[str] = "board-reflect"

    def __init__(self, store: ReadModelStore) -> None:
        self.store = store

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        doc = {
            "card_id": event.card_id,
            "title": event.title,
            "column": event.column,
            "labels": list(event.labels),
            "deleted": event.deleted,
            "last_type": event.type,
        }
        fresh = await self.store.upsert_if_newer(self.name, tenant_id, event.card_id, event.seq, doc)
        return "applied" if fresh else "stale (newer event already applied)"

    async def reset(self, tenant_id: str) -> None:
        await self.store.reset(self.name, tenant_id)

    async def cards(self, tenant_id: str) -> list[dict[str, Any]]:
        return await self.store.list(self.name, tenant_id)
