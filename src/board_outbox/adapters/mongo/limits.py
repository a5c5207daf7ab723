"""``board_outbox_limits`` on MongoDB (F2): concurrency slots and rate counters shared by every
replica, each call atomic on one document (no transaction).

- In flight: ``limit`` slot documents ``{_id: "<key>#<k>", key, holder, until}``. One read finds
  the slots worth trying; each is taken by an ``update_one`` filtered on "free" (no holder, ours,
  expired, or an ``until`` that is not a number) with ``upsert``: a missing slot is inserted, and a
  DuplicateKeyError means another holder has it (try the next).
- Per second: one counter ``{_id: "<key>@<window>:<start>", n}`` per window, ``$inc``-ed only
  while ``n`` is below the window's allowance; the upsert's DuplicateKeyError means the window is
  full (one retry: two first launches of a window may race on the insert).

A slot lives as long as its launch: ``renew`` pushes its ``until`` on, fenced on the holder (a
slot taken over is never renewed), and ``release`` frees it when the launch ends.

Every document carries ``expire_at`` (a date) for the TTL index (``LIMIT_INDEXES``, created by
``schema.py`` at start): the collection holds the slots in use and the last minutes' counters,
never more. ``upkeep`` re-creates the indexes when the collection was dropped under a running
service (a periodic pass, one index listing when nothing is missing).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pymongo import ASCENDING, IndexModel, ReturnDocument
from pymongo.errors import DuplicateKeyError

from board_outbox.adapters.mongo.errors import translated
from board_outbox.model.bounds import MAX_SLOTS
from board_outbox.model.limits import EXPIRY_MARGIN_SECONDS, rate_slot, slot_id
from board_outbox.model.records import LimitHolder
from board_outbox.model.row_documents import LEASE_HORIZON_SECONDS
from board_outbox.model.service_documents import LIMITS_COLLECTION, counter_problem, report_slot, slot_is_free
from board_outbox.model.validation import finite

LIMITS = LIMITS_COLLECTION
# a key's slots are renewed and released by key and holder; slots and counters expire (TTL)
LIMIT_INDEXES = [IndexModel([("key", ASCENDING), ("holder", ASCENDING)], name="key_holder"),
                 IndexModel([("expire_at", ASCENDING)], name="expire_ttl", expireAfterSeconds=0)]


def _expire_at(t: float) -> datetime:
    return datetime.fromtimestamp(t + EXPIRY_MARGIN_SECONDS, UTC)


def _free(holder: str, now: float) -> dict[str, Any]:
    # NaN and Infinity are numbers to the store: a slot holding one, or ending further ahead
    # than any lease, is taken over like a malformed one (``validation.slot_problem``)
    return {"$or": [{"holder": None}, {"holder": holder}, {"until": {"$lte": now}},
                    {"until": {"$not": {"$type": "number"}}}, {"until": float("nan")},
                    {"until": {"$gt": now + LEASE_HORIZON_SECONDS}}]}


class MongoLimitStore:
    def __init__(self, db: Any) -> None:
        self.coll = db[LIMITS]

    @translated
    async def acquire(self, key: str, limit: int, holder: str, until: float, now: float) -> bool:
        ids = [slot_id(key, k) for k in range(limit)]
        docs = await self.coll.find({"_id": {"$in": ids}}, {"holder": 1, "until": 1}).to_list(None)
        # a held slot no launch can have written (``slot_problem``) is taken over from the
        # holder it was read with: a compare-and-set on that holder, whatever its until holds
        malformed = {d["_id"]: d.get("holder") for d in docs if report_slot(d, str(d["_id"]), now)}
        held = {d["_id"] for d in docs if not slot_is_free(d, holder, now)}
        for sid in ids:
            if sid in held:
                continue
            flt = ({"_id": sid, "holder": malformed[sid]} if sid in malformed
                   else {"_id": sid, **_free(holder, now)})
            try:
                await self.coll.update_one(
                    flt,
                    {"$set": {"key": key, "holder": holder, "until": until,
                              "expire_at": _expire_at(until)}},
                    upsert=True)
            except DuplicateKeyError:
                continue  # taken since the read
            return True
        return False

    @translated
    async def renew(self, key: str, holder: str, until: float) -> bool:
        res = await self.coll.update_one(
            {"key": key, "holder": holder},
            {"$set": {"until": until, "expire_at": _expire_at(until)}})
        return bool(res.matched_count)

    @translated
    async def release(self, key: str, holder: str) -> None:
        await self.coll.update_many({"key": key, "holder": holder}, {"$set": {"holder": None}})

    @translated
    async def take(self, key: str, per_second: float, now: float) -> bool:
        cid, allowed, end = rate_slot(key, per_second, now)
        for _ in range(2):
            try:
                await self.coll.find_one_and_update(
                    # a counter below 0 is not a count: its window stays shut (no match, and
                    # the upsert meets the duplicate key), never open to ``allowed - n``
                    {"_id": cid, "n": {"$gte": 0, "$lt": allowed}},
                    {"$inc": {"n": 1}, "$setOnInsert": {"expire_at": _expire_at(end)}},
                    upsert=True, return_document=ReturnDocument.AFTER)
            except DuplicateKeyError:
                continue  # full, or a racing first launch inserted it: look once more
            return True
        return False


    @translated
    async def holders(self, key: str, now: float) -> list[LimitHolder]:
        # over ``key_holder``; a key has at most MAX_SLOTS slots (a limit is at most that)
        docs = await (self.coll.find({"key": key, "holder": {"$ne": None}},
                                     {"holder": 1, "until": 1})
                      .limit(MAX_SLOTS).to_list(None))
        out = []
        for d in docs:  # each parsed alone: a bad one is left out, reported once
            if report_slot(d, str(d["_id"]), now):
                continue
            holder, until = d.get("holder"), finite(d.get("until"))
            if isinstance(holder, str) and until is not None and until > now:
                out.append(LimitHolder(holder=holder, until=until))
        return sorted(out, key=lambda h: h.holder)

    @translated
    async def counted(self, key: str, per_second: float, now: float) -> int | None:
        doc = await self.coll.find_one({"_id": rate_slot(key, per_second, now)[0]}, {"n": 1})
        if doc is None:
            return 0
        n = doc.get("n")
        return n if counter_problem(doc) is None and isinstance(n, int) else None

    @translated
    async def upkeep(self) -> list[str]:
        present = set(await self.coll.index_information())
        missing = [m for m in LIMIT_INDEXES if m.document["name"] not in present]
        if missing:
            # all of them: an index there already is left as it is (same name, same options)
            await self.coll.create_indexes(LIMIT_INDEXES)
        return [m.document["name"] for m in missing]
