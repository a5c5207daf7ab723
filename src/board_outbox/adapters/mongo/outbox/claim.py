"""Rows in and claimed: the insert (rows born pending, or born claimed for the tail's own
worker, adopting what an earlier insert of ours left claimed), the claim of due rows across
tenants (F1's pick) and the reclaim of expired leases. Apart from the marks: these statements
choose rows and mint claims; the marks only move rows a claim already holds."""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection, Sequence
from typing import Any

from bson import ObjectId
from pymongo import ASCENDING, DESCENDING, ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure

from board_outbox.adapters.mongo.errors import translated
from board_outbox.adapters.mongo.outbox.statements import (
    BY_ID,
    ROW_CHUNK,
    TENANT_INDEX,
    OutboxCollection,
    by_ids,
    chunks,
    update_of,
)
from board_outbox.model import fairness
from board_outbox.model import transitions as T
from board_outbox.model.bad_documents import cap
from board_outbox.model.codec import to_doc
from board_outbox.model.errors import BrokenRow
from board_outbox.model.rows import CLAIMED, PENDING, EffectRow, born_due, new_row_doc
from board_outbox.model.validation import finite
from board_outbox.ports import Claim, ClaimTerms, UpsertResult

DUPLICATE_KEY = 11000


# the pick's third query under a backlog: the key of the partial index on the pending rows of a
# priority above 0 (``schema``): highest priority first, then oldest due first
PRIORITY_ORDER = [("priority", DESCENDING), ("not_before", ASCENDING)]
PRIORITY_INDEX = "pending_priority_not_before"


def _due(doc: dict[str, Any]) -> float:
    """A due row's ``not_before`` as a sort key (one that is not a finite number: first)."""
    due = finite(doc.get("not_before"))
    return -float("inf") if due is None else due


class OutboxClaims(OutboxCollection):
    """``upsert_rows``, ``claim_any``, ``reclaim_expired``."""

    @translated
    async def upsert_rows(
        self, rows: Sequence[EffectRow], *, claim: ClaimTerms | None = None
    ) -> UpsertResult:
        """One unordered ``insert_many``: a duplicate key (the unique ``row_key``) means the row
        exists -- racing replicas collapse on it -- and the stored row is left as it is. Cheaper
        than an upsert per row on every server (no query stage per row). The ``_id`` of each
        row is chosen here, so the rows inserted are known without reading anything back."""
        if not rows:
            return UpsertResult(0, 0)
        shared: dict[int, Any] = {}  # the rows of one event share its snapshot's document
        t = None if claim is None else T.claim(claim_id=claim.claim_id, now=rows[0].created_at,
                                               lease_until=claim.lease_until)
        docs = []
        claimed: list[bool] = []
        for r in rows:
            doc = new_row_doc(r, shared)
            claimed.append(t is not None and born_due(r))  # a coalescing row waits its quiet time
            if claimed[-1] and t is not None:
                doc.update(t.set, updated_at=r.updated_at)
            doc["_id"] = ObjectId()
            docs.append(doc)
        refused: set[int] = set()
        try:
            await self.coll.insert_many(docs, ordered=False)
        except BulkWriteError as exc:
            # Two replicas racing on one row_key: the loser's insert hits the unique index. The
            # row exists, which is all the insert wanted; anything else is a real error.
            details = exc.details
            errors = details.get("writeErrors", [])
            if any(e.get("code") != DUPLICATE_KEY for e in errors) or details.get("writeConcernErrors"):
                raise
            refused = {int(e["index"]) for e in errors}
        inserted = len(rows) - len(refused)
        claims: tuple[Claim, ...] = ()
        if t is not None and claim is not None:
            claims = tuple(T.claim_of_row(docs[i]["_id"], r, t, claim_id=claim.claim_id,
                                          lease_until=claim.lease_until)
                           for i, r in enumerate(rows) if i not in refused and claimed[i])
            if refused:
                claims += await self._adopted([rows[i].row_key for i in sorted(refused)], claim)
        return UpsertResult(inserted, len(refused), claims)

    async def _adopted(self, keys: list[str], claim: ClaimTerms) -> tuple[Claim, ...]:
        """The rows of ``keys`` (refused as existing) stored claimed under the terms' claim id or
        one they adopt: an earlier insert of ours that landed after we gave up on it. One read
        by ``row_key`` (its unique index) per ``ROW_CHUNK`` keys, only when an insert met rows
        that exist."""
        ours = {claim.claim_id, *claim.adopt}
        out: list[Claim] = []
        for chunk in chunks(keys):
            for d in await self.coll.find({"row_key": {"$in": chunk}}).to_list(None):
                until = finite(d.get("lease_until"))
                if d.get("state") == CLAIMED and d.get("claim_id") in ours and until is not None:
                    out.append(T.claim_of(d["_id"], d, claim_id=d["claim_id"], lease_until=until,
                                          reclaimed=False))
        return tuple(out)

    @translated
    async def claim_any(
        self, now: float, lease_seconds: float, limit: int, *,
        prefer: Collection[str] | None = None, steal_before: float | None = None,
        tenants: Collection[str] | None = None,
    ) -> list[Claim]:
        """S2: one pick over the ``pending_not_before`` index for every tenant (an idle poll is
        this one query), then one findAndModify for a single row or update_many + read back.
        The lease runs from the claim write, not from ``now``: a slow pick does not eat it.

        F1: the claim takes the picked rows round-robin by tenant (``fairness.pick``). A pick
        that fills its window means a backlog, which may hide other tenants' rows behind one
        tenant's: then a second query, bounded the same, reads the oldest due rows of the
        tenants the first did not return (over the ``pending_tenant_not_before`` index, whose
        bounds skip the backlogged tenants' keys), and a third the due rows of a priority above
        0, highest first, then oldest first (over the ``pending_priority_not_before`` index,
        which holds only those: a seek on an empty index while no subscription sets a
        priority), so a high-priority row newer than the window still goes first within its
        tenant's share. The third query's rows only compete for the places of their tenant's
        rows the first two read (``fairness.ranked``): priority never crosses tenants.
        Three round trips under a backlog, one otherwise, whatever the number of tenants: a
        pick that does not fill its window has read every due row, priorities and all.

        The rows read reach ``fairness.pick`` oldest due first (sorted here: on a server that
        walks ``pending_not_before`` that is the order they came in; a tenant's rows from the
        second query are newer than its rows in the window, or it has none there).
        Under a preference the window is twice the limit, so owned rows behind others' fresh
        (not yet stealable) rows still fill the claim.
        A negative priority sinks a row beneath the subscription rows of its tenant this pick
        sees: under a backlog, a row at -1 in the window goes before a newer row at 0 of its
        tenant outside it (the window moves on by age, so that row's turn comes by age as
        ever)."""
        started = time.monotonic()
        due: dict[str, Any] = {"state": PENDING, "not_before": {"$lte": now}}
        if tenants is not None:
            due["tenant_id"] = {"$in": sorted(tenants)}
        window = limit if prefer is None else limit * 2
        # No sort stage: mongod walks the ``pending_not_before`` index for this filter, which
        # yields the oldest due rows first; a sort would only add work on servers that sort.
        picked = await self.coll.find(due).limit(window).to_list(None)
        extra: list[dict[str, Any]] = []
        if len(picked) >= window:
            seen = sorted({d["tenant_id"] for d in picked if isinstance(d.get("tenant_id"), str)})
            hidden = {**due, "tenant_id": {**due.get("tenant_id", {}), "$nin": seen}}
            have = {d["_id"] for d in picked}
            # hinted to the index whose bounds skip the seen tenants' keys (mongod plans it so;
            # a planner that plans a ``$nin`` on no index scanned the collection for it)
            picked += [d for d in await self.coll.find(hidden).hint(TENANT_INDEX).limit(window)
                       .to_list(None) if d["_id"] not in have]
            urgent = {**due, "priority": {"$gt": 0}}
            have = {d["_id"] for d in picked}
            # hinted: a planner that would not pick the partial index (the wire test server
            # scans the collection, history and all, without it) reads only its entries; in
            # the index's own order, so no sort stage where the server sorts by the index
            top = await (self.coll.find(urgent).sort(PRIORITY_ORDER).hint(PRIORITY_INDEX)
                         .limit(window).to_list(None))
            # they compete for the places of their tenant's rows read above and hold none: a
            # priority never gives a tenant more of the claim, nor one the window did not see
            extra = [d for d in top if d["_id"] not in have]
        # oldest due first, whatever order the server returned them in: a planner may walk
        # another index (a tenant filter: ``pending_tenant_not_before``, tenant by tenant) and a
        # server that walks none returns them as stored; at most three windows of documents
        picked.sort(key=_due)
        extra.sort(key=_due)
        picked = fairness.pick(picked, limit, prefer=prefer, steal_before=steal_before,
                               extra=extra)
        ids = [d["_id"] for d in picked]
        if not ids:
            return []
        claim_id = uuid.uuid4().hex
        lease_until = now + (time.monotonic() - started) + lease_seconds
        update = update_of(T.claim(claim_id=claim_id, now=now, lease_until=lease_until))
        if len(ids) == 1:
            doc = await self.coll.find_one_and_update(
                by_ids(ids, **due), update, return_document=ReturnDocument.AFTER, hint=BY_ID)
            docs = [] if doc is None else [doc]
        else:
            modified = 0
            for chunk in chunks(ids):
                res = await self.coll.update_many(by_ids(chunk, **due), update, hint=BY_ID)
                modified += int(res.modified_count)
            if modified == len(ids):
                # no race lost: the picked documents plus the claim's fields are what is stored
                docs = [{**d, **update["$set"]} for d in picked]
            else:
                docs = [d for d in await self.read_ids(ids) if d.get("claim_id") == claim_id]
        return [T.claim_of(d["_id"], d, claim_id=claim_id, lease_until=lease_until,
                           reclaimed=False) for d in docs]

    @translated
    async def reclaim_expired(
        self, now: float, lease_seconds: float, limit: int, *,
        tenants: Collection[str] | None = None,
    ) -> list[Claim]:
        """Expired leases across tenants in a constant number of round trips: one query finds
        them (nothing, almost always); then one update_many reclaims those still expired under
        a fresh claim_id (attempts +1, M9), a read back, and one bulk write records why."""
        started = time.monotonic()
        expired: dict[str, Any] = {"state": CLAIMED, "lease_until": {"$lte": now}}
        if tenants is not None:
            expired["tenant_id"] = {"$in": sorted(tenants)}
        found = await (self.coll.find(expired, {"_id": 1, "attempts": 1, "errors": 1})
                       .limit(limit).to_list(None))
        if not found:
            return []
        claim_id = uuid.uuid4().hex
        lease_until = now + (time.monotonic() - started) + lease_seconds
        t = T.reclaim(claim_id=claim_id, now=now, lease_until=lease_until)
        # R1: a row whose document refuses the reclaim is named before any row is written (the
        # caller parks it and sweeps again); an update_many that fails on it would have
        # reclaimed the rows before it under a claim nobody holds, left for a whole lease
        for d in found:
            problem = T.refusal(d, t) or T.refusal(d, T.lease_expired(attempt=0, now=now))
            if problem is not None:
                raise BrokenRow(d["_id"], f"reclaim: {cap(problem, 500)}")
        ids = [d["_id"] for d in found]
        reclaim = update_of(t)
        for chunk in chunks(ids):
            try:
                await self.coll.update_many(by_ids(chunk, **expired), reclaim, hint=BY_ID)
            except OperationFailure:  # a document refuses the reclaim ($inc on a non-number)
                for one in chunk:
                    try:
                        await self.coll.update_one(by_ids([one], **expired), reclaim, hint=BY_ID)
                    except OperationFailure as exc:
                        raise BrokenRow(one, f"reclaim: {cap(exc, 500)}") from exc
        docs = [d for d in await self.read_ids(ids) if d.get("claim_id") == claim_id]
        if not docs:
            return []
        whys = [T.lease_expired(attempt=int(d.get("attempts", 1)), now=now) for d in docs]
        for at in range(0, len(docs), ROW_CHUNK):
            part = docs[at:at + ROW_CHUNK]
            try:
                await self.coll.bulk_write(
                    [UpdateOne(by_ids([d["_id"]], claim_id=claim_id), update_of(why), hint=BY_ID)
                     for d, why in zip(part, whys[at:at + ROW_CHUNK], strict=True)],
                    ordered=False)
            except BulkWriteError as exc:  # a document refuses the $push (errors not an array)
                refused = exc.details.get("writeErrors") or []
                if not refused or exc.details.get("writeConcernErrors"):
                    raise
                bad = part[int(refused[0]["index"])]["_id"]
                raise BrokenRow(bad, f"reclaim: {cap(refused[0].get('errmsg'), 500)}") from exc
        claims: list[Claim] = []
        for d, why in zip(docs, whys, strict=True):
            assert why.error is not None
            d.setdefault("errors", []).append(to_doc(why.error))
            claims.append(T.claim_of(d["_id"], d, claim_id=claim_id, lease_until=lease_until,
                                     reclaimed=True))
        return claims
