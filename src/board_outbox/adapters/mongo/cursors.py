"""Per-tenant cursors (``trigger_cursors``) with compare-and-set."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from pymongo import ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError

from board_outbox.adapters.mongo.errors import translated
from board_outbox.model.bad_documents import BAD_DOCUMENTS, cap
from board_outbox.model.epoch import EPOCH_KEY, epoch_at
from board_outbox.model.errors import StoreError
from board_outbox.model.service_documents import seqs_by_tenant
from board_outbox.model.validation import is_seq

CURSORS = "trigger_cursors"


class MongoCursorStore:
    def __init__(self, db: Any) -> None:
        self.coll = db[CURSORS]

    @translated
    async def get(self, tenant_id: str) -> int | None:
        doc = await self.coll.find_one({"_id": tenant_id})
        return None if doc is None else _seq(tenant_id, doc)

    @translated
    async def epoch(self, now: float) -> float:
        # one round trip: the insert when there is none yet, else the stored one unchanged
        try:
            doc = await self.coll.find_one_and_update(
                {"_id": EPOCH_KEY}, {"$setOnInsert": {"at": now}}, upsert=True,
                return_document=ReturnDocument.AFTER)
        except DuplicateKeyError:  # another replica's first start inserted it at the same time
            doc = await self.coll.find_one({"_id": EPOCH_KEY})
        return epoch_at(doc, now)

    @translated
    async def seed(self, tenant_id: str, value: int) -> int:
        await self.coll.update_one(
            {"_id": tenant_id}, {"$setOnInsert": {"seq": value}}, upsert=True
        )
        doc = await self.coll.find_one({"_id": tenant_id})
        return _seq(tenant_id, doc)

    @translated
    async def compare_and_set(self, tenant_id: str, expected: int, new: int) -> bool:
        res = await self.coll.update_one({"_id": tenant_id, "seq": expected},
                                         {"$set": {"seq": new}, "$unset": {"held": ""}})
        return bool(res.modified_count == 1)

    @translated
    async def seed_many(self, values: Mapping[str, int]) -> None:
        if not values:
            return
        ops = [UpdateOne({"_id": t}, {"$setOnInsert": {"seq": v}}, upsert=True)
               for t, v in values.items()]
        try:
            await self.coll.bulk_write(ops, ordered=False)
        except BulkWriteError as exc:
            # another replica seeding the same tenant at once: its cursor exists, as wanted
            if any(e.get("code") != 11000 for e in exc.details.get("writeErrors", [])):
                raise

    @translated
    async def put(self, tenant_id: str, value: int) -> None:
        await self.coll.update_one({"_id": tenant_id},
                                   {"$set": {"seq": value}, "$unset": {"held": ""}}, upsert=True)

    @translated
    async def hold(self, tenant_id: str, cursor: int, counter: int) -> None:
        await self.coll.update_one({"_id": tenant_id, "seq": cursor},
                                   {"$set": {"held": {"cursor": cursor, "counter": counter}}})

    @translated
    async def holds(self, tenants: Collection[str] | None = None
                    ) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        q: dict[str, Any] = {"held": {"$exists": True}}
        if tenants is not None:
            q["_id"] = {"$in": list(tenants)}  # by id: a page's tenants, not every cursor
        for d in await self.coll.find(q).to_list(None):
            held, t = d.get("held"), d.get("_id")
            c, n = (held.get("cursor"), held.get("counter")) if isinstance(held, dict) else (None, None)
            if isinstance(t, str) and isinstance(c, int) and isinstance(n, int) and is_seq(c) \
                    and is_seq(n) and d.get("seq") == c:
                out[t] = (c, n)
            else:  # a hold that no longer matches its cursor: the cursor moved, it is lifted
                BAD_DOCUMENTS.report(CURSORS, t, f"held {cap(repr(held), 100)} does not match "
                                     f"seq {cap(repr(d.get('seq')), 40)}", level=logging.WARNING)
        return out

    @translated
    async def all(self) -> dict[str, int]:
        # a cursor whose seq is not a true int is left out (reported once): its tenant then
        # looks behind, is drained, and stalls alone with the reason (R1) -- the poll net goes
        # on for the others
        # (the store's epoch, one document, is left out here: a query on it would scatter)
        docs = await self.coll.find({}).to_list(None)
        return seqs_by_tenant(CURSORS, ((d.get("_id"), d.get("seq")) for d in docs
                                        if d.get("_id") != EPOCH_KEY))

def _seq(tenant_id: str, doc: dict[str, Any]) -> int:
    """R2: a cursor is a true int; anything else stalls its tenant (StoreError), not the process."""
    seq = doc.get("seq")
    if not is_seq(seq):
        raise StoreError(f"{CURSORS} document of tenant {tenant_id!r}: seq "
                         f"{cap(repr(seq), 100)} is not an integer seq")
    assert isinstance(seq, int)
    return seq
