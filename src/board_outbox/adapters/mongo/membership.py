"""``board_outbox_members``: a lease per replica, renewed by heartbeats (S1). Two round trips
per heartbeat whatever the tenant count: renew ours, read the live ones -- and, in that read, the
pauses (``heartbeat_with_pauses``: one aggregate whose ``$unionWith`` appends the pause
documents, so the pauses cost no round trip of their own, S6).

Each lease document is parsed on its own (R1): one with a non-string id or an expiry that is
not a finite number is left out with one line (``BAD_DOCUMENTS``), never the whole view."""

from __future__ import annotations

from typing import Any

from board_outbox.adapters.mongo.errors import translated
from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.pause import PAUSES_COLLECTION, Pause, parse_pauses
from board_outbox.model.service_documents import member_problem
from board_outbox.model.validation import finite
from board_outbox.ports import Member

MEMBERS = "board_outbox_members"
PAUSE_TAG = "__pause"  # marks the pause documents among the members in the one read


def parse_members(docs: list[dict[str, Any]], now: float, collection: str) -> list[Member]:
    """The live, well-formed leases of ``docs`` (each bad one reported, once, and skipped)."""
    out: list[Member] = []
    for d in docs:
        member_id, expires_at = d.get("_id"), d.get("expires_at")
        problem = member_problem(member_id, expires_at, now)
        if problem is not None:
            BAD_DOCUMENTS.report(collection, member_id, problem)
            continue
        exp = finite(expires_at)
        if isinstance(member_id, str) and exp is not None and exp > now:
            out.append(Member(member_id, exp))
    return sorted(out, key=lambda m: m.member_id)


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
    async def heartbeat_with_pauses(self, member_id: str, now: float, ttl_seconds: float,
                                    ) -> tuple[list[Member], list[Pause]]:
        await self.coll.update_one({"_id": member_id},
                                   {"$set": {"expires_at": now + ttl_seconds, "seen_at": now}},
                                   upsert=True)
        cursor = await self.coll.aggregate([{"$unionWith": {
            "coll": PAUSES_COLLECTION, "pipeline": [{"$addFields": {PAUSE_TAG: True}}]}}])
        members: list[dict[str, Any]] = []
        pause_docs: list[tuple[object, dict[str, Any]]] = []
        for doc in await cursor.to_list(None):
            if doc.pop(PAUSE_TAG, None) is True:
                pause_docs.append((doc.get("_id"), doc))
            else:
                members.append(doc)
        pauses = parse_pauses(pause_docs)
        return parse_members(members, now, MEMBERS), pauses

    @translated
    async def live(self, now: float) -> list[Member]:
        return await self._live(now)

    async def _live(self, now: float) -> list[Member]:
        # every lease, parsed one by one: an expiry that is not a number (a string, a date,
        # a Decimal128) is reported, not silently ignored -- the collection holds one small
        # document per replica
        docs = await self.coll.find({}).to_list(None)
        return parse_members(docs, now, MEMBERS)

    @translated
    async def leave(self, member_id: str) -> None:
        await self.coll.delete_one({"_id": member_id})
