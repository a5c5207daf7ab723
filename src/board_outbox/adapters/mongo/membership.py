"""``board_outbox_members``: a lease per replica, renewed by heartbeats (S1). Two round trips
per heartbeat whatever the tenant count: renew ours, read the live ones."""

from __future__ import annotations

from typing import Any

from board_outbox.adapters.mongo.errors import translated
from board_outbox.ports import Member

MEMBERS = "board_outbox_members"


class MongoMembershipStore:
    def __init__(self, db: Any) -> None:
        self.coll = db[MEMBERS]

    @translated
    async def heartbeat(self, member_id: str, now: float, ttl_seconds: float) -> list[Member]:
        await self.coll.update_one({"_id": member_id},
                                   {"$set": {"expires_at": now + ttl_seconds, "seen_at": now}},
                                   upsert=True)
        return await self._live(now)

    @translated
    async def live(self, now: float) -> list[Member]:
        return await self._live(now)

    async def _live(self, now: float) -> list[Member]:
        live = await self.coll.find({"expires_at": {"$gt": now}}).to_list(None)
        return sorted((Member(str(d["_id"]), float(d["expires_at"])) for d in live),
                      key=lambda m: m.member_id)

    @translated
    async def leave(self, member_id: str) -> None:
        await self.coll.delete_one({"_id": member_id})
