"""The change stream's resume token on MongoDB."""

from __future__ import annotations

from typing import Any

from board_outbox.adapters.mongo.errors import translated

STATE = "board_outbox_state"


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
