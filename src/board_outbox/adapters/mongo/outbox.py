"""``trigger_effects``: the durable effect outbox on MongoDB.

- upsert: one unordered ``bulk_write`` of ``$setOnInsert`` upserts keyed by ``row_key``;
- claim: due pending rows are claimed as a batch (pick, one ``update_many`` minting a
  ``claim_id`` and a lease, read back); an expired lease is reclaimed per row with
  ``find_one_and_update``, ``attempts`` +1;
- every mark applies an ``outbox_transitions`` transition filtered on ``{_id, state: claimed,
  claim_id}``: a stolen lease makes it a no-op.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Collection, Sequence
from typing import Any

from pymongo import DESCENDING, ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure, PyMongoError

from board_outbox.adapters.mongo.errors import is_transient, translated
from board_outbox.model import transitions as T
from board_outbox.model.domain import (
    CLAIMED,
    FAILED,
    LIVE_STATES,
    PENDING,
    EffectRow,
    from_doc,
    new_row_doc,
    to_doc,
)
from board_outbox.model.errors import BrokenRow, MalformedDocument, MalformedRow
from board_outbox.model.validation import LEASE_HORIZON_SECONDS, ROW_STATES, OnceLog, cap, is_seq, park_fields
from board_outbox.ports import Claim, RowFilter, UpsertResult

EFFECTS = "trigger_effects"
_once = OnceLog(logging.getLogger("board_outbox.outbox"))
DUPLICATE_KEY = 11000


def row_query(flt: RowFilter) -> dict[str, Any]:
    q: dict[str, Any] = {}
    if flt.tenant_id is not None:
        q["tenant_id"] = flt.tenant_id
    if flt.states:
        q["state"] = {"$in": list(flt.states)}
    if flt.kind is not None:
        # a row without ``kind`` is a launch (the zero value)
        q["kind"] = {"$in": ["launch", None]} if flt.kind == "launch" else flt.kind
    upd: dict[str, float] = {}
    if flt.updated_after is not None:
        upd["$gte"] = flt.updated_after
    if flt.updated_before is not None:
        upd["$lt"] = flt.updated_before
    if upd:
        q["updated_at"] = upd
    return q


def _decode(doc: dict[str, Any]) -> EffectRow:
    return from_doc(doc, EffectRow, MalformedRow)


def update_of(t: T.Transition) -> dict[str, Any]:
    """A transition as a MongoDB update document."""
    update: dict[str, Any] = {}
    if t.set:
        update["$set"] = dict(t.set)
    if t.count_attempt:
        update["$inc"] = {"attempts": 1}
    push: dict[str, Any] = {}
    if t.error is not None:
        push["errors"] = to_doc(t.error)
    if t.audit is not None:
        push["audit"] = to_doc(t.audit)
    if push:
        update["$push"] = push
    return update


class MongoEffectOutbox(T.FencedMarks):
    def __init__(self, db: Any) -> None:
        self.coll = db[EFFECTS]

    @translated
    async def upsert_rows(self, rows: Sequence[EffectRow]) -> UpsertResult:
        if not rows:
            return UpsertResult(0, 0)
        shared: dict[int, Any] = {}  # the rows of one event share its snapshot's document
        ops = [
            UpdateOne({"row_key": r.row_key}, {"$setOnInsert": new_row_doc(r, shared)}, upsert=True)
            for r in rows
        ]
        try:
            res = await self.coll.bulk_write(ops, ordered=False)
            inserted = int(res.upserted_count)
        except BulkWriteError as exc:
            # Two replicas racing on one row_key: the loser's upsert may hit the unique index.
            # The row exists, which is all $setOnInsert wanted; anything else is a real error.
            details = exc.details
            others = [e for e in details.get("writeErrors", []) if e.get("code") != DUPLICATE_KEY]
            if others or details.get("writeConcernErrors"):
                raise
            inserted = int(details.get("nUpserted", 0))
        return UpsertResult(inserted, len(rows) - inserted)

    @translated
    async def claim_due(
        self, tenant_id: str, now: float, lease_seconds: float, limit: int
    ) -> list[Claim]:
        lease_until = now + lease_seconds
        claims = await self._reclaim_expired(tenant_id, now, lease_until, limit)
        if len(claims) < limit:
            claims += await self._claim_pending(tenant_id, now, lease_until, limit - len(claims))
        return claims

    async def _reclaim_expired(
        self, tenant_id: str, now: float, lease_until: float, limit: int
    ) -> list[Claim]:
        """Orphaned claims (their lease expired), one atomic find_one_and_update each: rare,
        and each one $incs attempts (M9) and records why."""
        claims: list[Claim] = []
        expired = {"tenant_id": tenant_id, "state": CLAIMED, "lease_until": {"$lte": now}}
        while len(claims) < limit:
            claim_id = uuid.uuid4().hex
            try:
                doc = await self.coll.find_one_and_update(
                    expired,
                    update_of(T.reclaim(claim_id=claim_id, now=now, lease_until=lease_until)),
                    return_document=ReturnDocument.AFTER,
                )
            except PyMongoError as exc:  # R1: a row whose shape refuses $inc is named, not fatal
                # the refused update changed nothing (a twin that applied part of it has set
                # our claim_id): either way one query finds the row
                bad = None if is_transient(exc) else await self.coll.find_one(
                    {"$or": [expired, {"tenant_id": tenant_id, "claim_id": claim_id}]}, {"_id": 1})
                if bad is None:
                    raise
                raise BrokenRow(bad["_id"], f"reclaim: {cap(exc, 500)}") from exc
            if doc is None:
                break
            attempts = doc.get("attempts", 1)
            why = T.lease_expired(attempt=attempts if is_seq(attempts) else 0, now=now)
            try:
                await self.coll.update_one({"_id": doc["_id"], "claim_id": claim_id},
                                           update_of(why))
            except PyMongoError as exc:
                if is_transient(exc):
                    raise
                raise BrokenRow(doc["_id"], f"reclaim: {cap(exc, 500)}") from exc
            assert why.error is not None
            doc.setdefault("errors", []).append(to_doc(why.error))
            claims.append(T.claim_of(doc["_id"], doc, claim_id=claim_id, lease_until=lease_until,
                                     reclaimed=True))
        return claims

    async def _claim_pending(
        self, tenant_id: str, now: float, lease_until: float, limit: int
    ) -> list[Claim]:
        """Due pending rows in three round trips per pass, whatever the batch size: pick
        candidates, claim those still pending with one update_many under a fresh claim_id (each
        document update is atomic, so a racing worker gets the others), read back what is ours.
        Rows lost to a racing worker are replaced by another pass."""
        due = {"tenant_id": tenant_id, "state": PENDING, "not_before": {"$lte": now}}
        claims: list[Claim] = []
        for _ in range(8):
            want = limit - len(claims)
            picked = await self.coll.find(due, {"_id": 1}).sort("not_before", 1).limit(want).to_list(None)
            if not picked:
                break
            ids = [d["_id"] for d in picked]
            claim_id = uuid.uuid4().hex
            await self.coll.update_many(
                {**due, "_id": {"$in": ids}},
                update_of(T.claim(claim_id=claim_id, now=now, lease_until=lease_until)),
            )
            mine = await self.coll.find({"_id": {"$in": ids}, "claim_id": claim_id}).to_list(None)
            mine.sort(key=lambda d: (d.get("not_before", 0.0), str(d.get("row_key"))))
            claims += [T.claim_of(doc["_id"], doc, claim_id=claim_id, lease_until=lease_until,
                                  reclaimed=False) for doc in mine]
            if len(mine) == len(ids) or len(claims) >= limit:
                break  # no race lost (or enough): nothing more to gain from another pass
        return claims

    @translated
    async def claim_any(
        self, now: float, lease_seconds: float, limit: int, *,
        prefer: Collection[str] | None = None, steal_before: float | None = None,
    ) -> list[Claim]:
        """S2: one pick over the ``state_not_before`` index for every tenant (an idle poll is
        this one query), then one findAndModify for a single row or update_many + read back.
        The lease runs from the claim write, not from ``now``: a slow pick does not eat it."""
        started = time.monotonic()
        due = {"state": PENDING, "not_before": {"$lte": now}}
        window = limit if prefer is None else limit * 2
        # No sort stage: mongod walks the ``state_not_before`` index for this filter, which
        # yields the oldest due rows first; a sort would only add work on servers that sort.
        picked = await self.coll.find(due).limit(window).to_list(None)
        if prefer is not None:
            mine = [d for d in picked if d.get("tenant_id") in prefer]
            others = [d for d in picked if d.get("tenant_id") not in prefer
                      and (steal_before is None or float(d.get("not_before", 0.0)) <= steal_before)]
            picked = mine + others
        picked = picked[:limit]
        ids = [d["_id"] for d in picked]
        if not ids:
            return []
        claim_id = uuid.uuid4().hex
        lease_until = now + (time.monotonic() - started) + lease_seconds
        update = update_of(T.claim(claim_id=claim_id, now=now, lease_until=lease_until))
        if len(ids) == 1:
            doc = await self.coll.find_one_and_update(
                {**due, "_id": ids[0]}, update, return_document=ReturnDocument.AFTER)
            docs = [] if doc is None else [doc]
        else:
            res = await self.coll.update_many({**due, "_id": {"$in": ids}}, update)
            if int(res.modified_count) == len(ids):
                # no race lost: the picked documents plus the claim's fields are what is stored
                docs = [{**d, **update["$set"]} for d in picked]
            else:
                docs = await self.coll.find({"_id": {"$in": ids}, "claim_id": claim_id}).to_list(None)
                order = {ref: i for i, ref in enumerate(ids)}
                docs.sort(key=lambda d: order.get(d["_id"], 0))
        return [T.claim_of(d["_id"], d, claim_id=claim_id, lease_until=lease_until,
                           reclaimed=False) for d in docs]

    @translated
    async def reclaim_expired(self, now: float, lease_seconds: float, limit: int) -> list[Claim]:
        """Expired leases across tenants in a constant number of round trips: one query finds
        them (nothing, almost always); then one update_many reclaims those still expired under
        a fresh claim_id (attempts +1, M9), a read back, and one bulk write records why."""
        started = time.monotonic()
        expired = {"state": CLAIMED, "lease_until": {"$lte": now}}
        ids = [d["_id"] for d in await self.coll.find(expired, {"_id": 1}).limit(limit).to_list(None)]
        if not ids:
            return []
        claim_id = uuid.uuid4().hex
        lease_until = now + (time.monotonic() - started) + lease_seconds
        reclaim = update_of(T.reclaim(claim_id=claim_id, now=now, lease_until=lease_until))
        try:
            await self.coll.update_many({**expired, "_id": {"$in": ids}}, reclaim)
        except OperationFailure:  # a document refuses the reclaim ($inc on a non-number): find it
            for one in ids:
                try:
                    await self.coll.update_one({**expired, "_id": one}, reclaim)
                except OperationFailure as exc:
                    raise BrokenRow(one, f"reclaim: {cap(exc, 500)}") from exc
        docs = await self.coll.find({"_id": {"$in": ids}, "claim_id": claim_id}).to_list(None)
        if not docs:
            return []
        whys = [T.lease_expired(attempt=int(d.get("attempts", 1)), now=now) for d in docs]
        await self.coll.bulk_write(
            [UpdateOne({"_id": d["_id"], "claim_id": claim_id}, update_of(why))
             for d, why in zip(docs, whys, strict=True)], ordered=False)
        claims: list[Claim] = []
        for d, why in zip(docs, whys, strict=True):
            assert why.error is not None
            d.setdefault("errors", []).append(to_doc(why.error))
            claims.append(T.claim_of(d["_id"], d, claim_id=claim_id, lease_until=lease_until,
                                     reclaimed=True))
        return claims

    @translated
    async def mark_done_many(
        self, marks: Sequence[tuple[Any, str, str]], now: float
    ) -> list[bool]:
        """One unordered bulk write of fenced ``done`` updates; only when some mark missed its
        claim does a read-back say which (``done`` keeps the claim_id)."""
        if not marks:
            return []
        ops = [UpdateOne({"_id": ref, "state": CLAIMED, "claim_id": cid},
                         update_of(T.done(now=now, outcome=outcome)))
               for ref, cid, outcome in marks]
        res = await self.coll.bulk_write(ops, ordered=False)
        if int(res.matched_count) == len(marks):  # the filter only matches a row we hold
            return [True] * len(marks)
        ours = await self.coll.find(
            {"_id": {"$in": [m[0] for m in marks]}, "state": "done"}, {"_id": 1, "claim_id": 1}
        ).to_list(None)
        held = {(d["_id"], d.get("claim_id")) for d in ours}
        return [(ref, cid) in held for ref, cid, _ in marks]

    @translated
    async def _apply_claimed(self, ref: Any, claim_id: str, t: T.Transition) -> bool:
        res = await self.coll.update_one({"_id": ref, "state": CLAIMED, "claim_id": claim_id},
                                         update_of(t))
        return bool(res.modified_count == 1)

    @translated
    async def _apply_claimed_many(self, refs: Sequence[Any], claim_id: str, t: T.Transition) -> list[Any]:
        """One fenced ``update_many``; only when a lease was stolen from some of the rows, one
        more read to learn which ones this claim moved (the moved rows keep our claim_id)."""
        if not refs:
            return []
        ids = list(refs)
        res = await self.coll.update_many({"_id": {"$in": ids}, "state": CLAIMED, "claim_id": claim_id},
                                          update_of(t))
        if res.modified_count == len(ids):
            return ids
        moved = {"_id": {"$in": ids}, "claim_id": claim_id, "state": t.set.get("state", CLAIMED)}
        return [d["_id"] for d in await self.coll.find(moved, {"_id": 1}).to_list(None)]

    @translated
    async def park_broken(
        self, ref: Any, now: float, error: str, *, claim_id: str | None = None
    ) -> bool:
        q: dict[str, Any] = {"_id": ref}
        if claim_id is not None:
            q["claim_id"] = claim_id
        doc = await self.coll.find_one(q)
        if doc is None:
            return False
        res = await self.coll.update_one(q, {"$set": park_fields(doc, now=now, error=error)})
        return bool(res.matched_count == 1)

    @translated
    async def stuck_rows(
        self, now: float, limit: int, horizon: float = LEASE_HORIZON_SECONDS
    ) -> list[tuple[Any, dict[str, Any]]]:
        not_number = {"$not": {"$type": "number"}}
        q = {"$or": [
            {"state": {"$nin": sorted(ROW_STATES)}},
            {"state": {"$in": list(LIVE_STATES)}, "tenant_id": {"$not": {"$type": "string"}}},
            {"state": PENDING, "not_before": not_number},
            {"state": CLAIMED, "lease_until": not_number},
            {"state": CLAIMED, "lease_until": {"$gt": now + horizon}},
        ]}
        docs = await self.coll.find(q).limit(limit).to_list(None)
        return [(d["_id"], d) for d in docs]

    @translated
    async def _apply_failed(self, row_key: str, t: T.Transition) -> bool:
        res = await self.coll.update_one({"row_key": row_key, "state": FAILED}, update_of(t))
        return bool(res.modified_count == 1)

    @translated
    async def get(self, row_key: str) -> EffectRow | None:
        doc = await self.coll.find_one({"row_key": row_key})
        return None if doc is None else _decode(doc)

    async def raw(self, row_key: str) -> dict[str, Any] | None:
        return await self.coll.find_one({"row_key": row_key})  # type: ignore[no-any-return]

    @translated
    async def find(self, flt: RowFilter) -> list[EffectRow]:
        cursor = (
            self.coll.find(row_query(flt))
            .sort([("updated_at", DESCENDING), ("row_key", DESCENDING)])
            .limit(flt.limit)
        )
        out: list[EffectRow] = []
        for doc in await cursor.to_list(None):
            try:
                out.append(_decode(doc))
            except MalformedDocument as exc:  # R2: left out of the listing, but said so once
                _once(("find", repr(doc.get("_id"))), logging.WARNING,
                      "a row that does not decode is left out: %s", exc)
        return out

    @translated
    async def count_by_state(self, tenant_id: str | None = None) -> dict[str, int]:
        pipeline: list[dict[str, Any]] = []
        if tenant_id is not None:
            pipeline.append({"$match": {"tenant_id": tenant_id}})
        pipeline.append({"$group": {"_id": "$state", "n": {"$sum": 1}}})
        cursor = await self.coll.aggregate(pipeline)
        return {str(d["_id"]): int(d["n"]) for d in await cursor.to_list(None)}

    @translated
    async def live_tenants(self) -> set[str]:
        found = await self.coll.distinct("tenant_id", {"state": {"$in": list(LIVE_STATES)}})
        return {str(t) for t in found}

    @translated
    async def oldest_live_created_at(self, tenant_id: str) -> float | None:
        doc = await self.coll.find_one(
            {"tenant_id": tenant_id, "state": {"$in": list(LIVE_STATES)}},
            {"created_at": 1}, sort=[("created_at", 1)],
        )
        return None if doc is None else float(doc.get("created_at") or 0.0)

    @translated
    async def purge(self, flt: RowFilter) -> int:
        q = row_query(flt)
        q["state"] = FAILED  # only dead-letters are ever purged
        ids = [d["_id"] for d in await self.coll.find(q, {"_id": 1}).limit(flt.limit).to_list(None)]
        if not ids:
            return 0
        res = await self.coll.delete_many({"_id": {"$in": ids}, "state": FAILED})
        return int(res.deleted_count)
