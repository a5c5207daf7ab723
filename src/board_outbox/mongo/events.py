"""``board_events`` with a per-tenant seq allocator (``board_event_counters``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo import ASCENDING, DESCENDING, ReturnDocument

from ..ports import EventRecord
from .errors import translated

EVENTS = "board_events"
COUNTERS = "board_event_counters"


class MongoEventLog:
    def __init__(self, db: Any) -> None:
        self.events = db[EVENTS]
        self.counters = db[COUNTERS]

    @translated
    async def allocate_seq(self, tenant_id: str) -> int:
        doc = await self.counters.find_one_and_update(
            {"_id": tenant_id}, {"$inc": {"seq": 1}}, upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        return int(doc["seq"])

    @translated
    async def insert(self, doc: Mapping[str, Any]) -> None:
        await self.events.insert_one(dict(doc))

    @translated
    async def read_after(self, tenant_id: str, after_seq: int, limit: int) -> list[EventRecord]:
        cursor = (
            self.events.find({"tenant_id": tenant_id, "seq": {"$gt": after_seq}}, {"_id": 0})
            .sort("seq", ASCENDING)
            .limit(limit)
        )
        return [EventRecord(d["seq"], d) for d in await cursor.to_list(None)]

    @translated
    async def max_inserted_seq(self, tenant_id: str) -> int:
        doc = await self.events.find_one(
            {"tenant_id": tenant_id}, {"seq": 1, "_id": 0}, sort=[("seq", DESCENDING)]
        )
        return int(doc["seq"]) if doc else 0

    @translated
    async def allocated_seq(self, tenant_id: str) -> int:
        doc = await self.counters.find_one({"_id": tenant_id})
        return int(doc["seq"]) if doc else 0

    @translated
    async def tenants(self) -> set[str]:
        return {str(d["_id"]) for d in await self.counters.find({}, {"_id": 1}).to_list(None)}
