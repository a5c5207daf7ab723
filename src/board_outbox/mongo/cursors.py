"""Per-tenant cursors (``trigger_cursors``) with compare-and-set, and the resume-token store."""

from __future__ import annotations

from typing import Any

from .errors import translated

CURSORS = "trigger_cursors"
STATE = "board_outbox_state"


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


class MongoResumeTokenStore:
    """The change stream's resume token, one per stream name (shared by every replica: any
    replica resuming from any persisted token is fine, the token only speeds up waking)."""

    def __init__(self, db: Any, name: str = "board_events") -> None:
        self.coll = db[STATE]
        self.key = f"resume_token:{name}"

    @translated
    async def load(self) -> Any | None:
        doc = await self.coll.find_one({"_id": self.key})
        return None if doc is None else doc.get("token")

    @translated
    async def save(self, token: Any) -> None:
        await self.coll.update_one({"_id": self.key}, {"$set": {"token": token}}, upsert=True)

    @translated
    async def clear(self) -> None:
        await self.coll.delete_one({"_id": self.key})
