"""``board_events`` with a per-tenant seq allocator (``board_event_counters``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo import ASCENDING, DESCENDING, ReturnDocument

from board_outbox.adapters.mongo.errors import translated
from board_outbox.model.bad_documents import cap
from board_outbox.model.epoch import written_before
from board_outbox.model.errors import StoreError
from board_outbox.model.service_documents import seqs_by_tenant
from board_outbox.model.validation import is_seq
from board_outbox.ports import EventRecord

EVENTS = "board_events"
COUNTERS = "board_event_counters"

# the fields an event is read for (``BoardEvent``; ``at`` also ages seq gaps): a board's own
# extra fields (payloads, diffs) are neither sent nor decoded (less to carry per event)
# ``trace``: the producer's W3C context (C7), parsed per event by the tail, whatever it holds
EVENT_FIELDS = {"_id": 0, "tenant_id": 1, "seq": 1, "type": 1, "card_id": 1, "at": 1, "actor": 1,
                "trace": 1}


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
        """The next events by seq, over ``tenant_seq_unique`` with both ends of the range set:
        seqs ``(after_seq, after_seq + limit]`` (a tenant's seqs are allocated one by one, so
        the window holds the next ``limit`` events but for gaps). The read is then bounded by
        the batch on any planner, not only on one that stops an index walk at the limit, however
        long the log past the cursor (T1). Only a window with no event at all (a gap as wide as
        the batch) costs one more, open-ended read. Fewer than ``limit`` events therefore does
        not mean the log ends there."""
        if is_seq(after_seq):
            docs = await self._read(tenant_id, {"$gt": after_seq, "$lte": after_seq + limit}, limit)
            if docs:
                return [EventRecord(d["seq"], d) for d in docs]
        docs = await self._read(tenant_id, {"$gt": after_seq}, limit)
        return [EventRecord(d["seq"], d) for d in docs]

    async def _read(self, tenant_id: str, seq: dict[str, Any], limit: int) -> list[dict[str, Any]]:
        cursor = (
            self.events.find({"tenant_id": tenant_id, "seq": seq}, EVENT_FIELDS)
            .sort("seq", ASCENDING)
            .limit(limit)
            .batch_size(limit)  # the whole batch in one reply: no getMore round trip
        )
        return await cursor.to_list(None)  # type: ignore[no-any-return]

    @translated
    async def max_inserted_seq(self, tenant_id: str) -> int:
        # the highest true-int seq (R2: a 2.5 or a Decimal128 is poison, not a head)
        docs = await (self.events.find({"tenant_id": tenant_id, "seq": {"$type": "number"}},
                                       {"seq": 1, "_id": 0})
                      .sort("seq", DESCENDING).limit(20).to_list(None))
        return next((d["seq"] for d in docs if is_seq(d["seq"])), 0)

    @translated
    async def seq_before(self, tenant_id: str, epoch: float) -> int:
        # down the (tenant_id, seq) index a page at a time: a tenant with history stops in the
        # first page (its newest event is older); one born after the epoch reads its few events
        top: int | float | None = None
        page = 20
        while True:
            seq: dict[str, Any] = {"$type": "number"}
            if top is not None:
                seq["$lt"] = top
            docs = await (self.events.find({"tenant_id": tenant_id, "seq": seq},
                                           {"seq": 1, "at": 1, "_id": 0})
                          .sort("seq", DESCENDING).limit(page).batch_size(page).to_list(None))
            for d in docs:
                if is_seq(d["seq"]) and written_before(d, epoch):
                    return int(d["seq"])
            if len(docs) < page:
                return 0
            top, page = docs[-1]["seq"], 500

    @translated
    async def allocated_seq(self, tenant_id: str) -> int:
        doc = await self.counters.find_one({"_id": tenant_id})
        if doc is None:
            return 0
        if not is_seq(doc.get("seq")):
            raise StoreError(f"{COUNTERS} document of tenant {tenant_id!r}: seq "
                             f"{cap(repr(doc.get('seq')), 100)} is not an integer seq")
        return int(doc["seq"])

    @translated
    async def tenants(self) -> set[str]:
        return {str(d["_id"]) for d in await self.counters.find({}, {"_id": 1}).to_list(None)}

    @translated
    async def heads(self) -> dict[str, int]:
        # each counter parsed on its own: a bad one is left out and reported once (R1), the
        # other tenants' heads stand
        docs = await self.counters.find({}).to_list(None)
        return seqs_by_tenant(COUNTERS, ((d.get("_id"), d.get("seq")) for d in docs))
