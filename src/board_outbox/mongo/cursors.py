"""Per-tenant cursors (``trigger_cursors``) with compare-and-set."""

from __future__ import annotations

from typing import Any

from .errors import translated

CURSORS = "trigger_cursors"


class MongoCursorStore:
    def __init__(self, db: Any) -> None:
        self.coll = db[CURSORS]

    @translated
    async def get(self, tenant_id: str) -> int | None:
        doc = await self.coll.find_one({"_id": tenant_id})
        return None if doc is None else int(doc["seq"])

    @translated
    async def seed(self, tenant_id: str, value: int) -> int:
        await self.coll.update_one(
            {"_id": tenant_id}, {"$setOnInsert": {"seq": value}}, upsert=True
        )
        doc = await self.coll.find_one({"_id": tenant_id})
        return int(doc["seq"])

    @translated
    async def compare_and_set(self, tenant_id: str, expected: int, new: int) -> bool:
        res = await self.coll.update_one({"_id": tenant_id, "seq": expected}, {"$set": {"seq": new}})
        return bool(res.modified_count == 1)
