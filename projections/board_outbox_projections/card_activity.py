"""card-activity: per card, the last ``keep`` events with who and when (newest first).

Each card document holds ``recent``: up to ``keep`` entries ``{seq, type, at, actor, column}``
sorted by seq, newest first. Entries are merged by seq (the store's ``PushRecent``), so applying
an event twice, or after newer ones, converges to the same list: the ``keep`` newest events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from board_outbox.sdk import EventSnapshot, PushRecent, ReadModelStore

KEEP = 10


class CardActivity:
    name: ClassVar[str] = "card-activity"
    keep: ClassVar[int] = KEEP

    def __init__(self, store: ReadModelStore) -> None:
        self.store = store

    def _op(self, event: EventSnapshot) -> PushRecent:
        entry = {"type": event.type, "at": event.at, "actor": event.actor, "column": event.column}
        return PushRecent(key=event.card_id, seq=event.seq, entry=entry, keep=self.keep)

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        return (await self.apply_many(tenant_id, [event]))[0]

    async def apply_many(self, tenant_id: str, events: Sequence[EventSnapshot]) -> list[str]:
        fresh = await self.store.write_many(self.name, tenant_id, [self._op(ev) for ev in events])
        return ["recorded" if ok else "already recorded" for ok in fresh]

    async def reset(self, tenant_id: str) -> None:
        await self.store.reset(self.name, tenant_id)

    async def activity(self, tenant_id: str, card_id: str) -> list[dict[str, Any]]:
        """The card's recent events, newest first (empty if none was applied)."""
        doc = await self.store.get(self.name, tenant_id, card_id)
        return list(doc.get("recent", [])) if doc else []
