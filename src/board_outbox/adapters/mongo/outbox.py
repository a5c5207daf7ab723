"""``trigger_effects``: the durable effect outbox on MongoDB.

- insert: one unordered ``insert_many``; a duplicate ``row_key`` means the row exists. The
  tail's rows for its own worker are born claimed (no claim statement, no pick for them);
- claim: due pending rows of every tenant are claimed as a batch (one pick, one
  ``update_many`` minting a ``claim_id`` and a lease, read back only after a lost race); expired
  leases are reclaimed the same way (one query, one ``update_many``), ``attempts`` +1;
- every mark applies a ``model/transitions`` transition filtered on ``{_id, state: claimed,
  claim_id}``: a stolen lease makes it a no-op; a batch of marks is one ``bulk_write``.

Every hot query is served by a partial index that holds only the rows in one state (``schema``:
pending by ``not_before``, claimed by ``lease_until``, failed by ``updated_at``, done by
``done_at``): its bounds cover the rows in that state, never the whole history.

Every statement that names rows (a claim, a reclaim, a lease beat, a batch of marks, the read
back after any of them, the release of held rows) names them by ``_id`` (``by_ids``), at most
``ROW_CHUNK`` a statement, one round trip each: it is served by the ``_id`` index on every planner
(hinted to it where the server takes hints on writes; the ``_id`` clause first for a planner that
serves the first clause it can; a read by ``_id`` alone, the rest checked here, since a planner
may walk a hinted index whole), and its server time stays well inside the op timeout however
many rows a replica holds.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec
import pymongo
from bson import ObjectId
from pymongo import ASCENDING, DESCENDING, ReturnDocument, UpdateMany, UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure, PyMongoError

from board_outbox.adapters.mongo import search, walks
from board_outbox.adapters.mongo.errors import translated
from board_outbox.model import fairness
from board_outbox.model import transitions as T
from board_outbox.model.bad_documents import OnceLog, cap
from board_outbox.model.codec import from_doc, to_doc
from board_outbox.model.errors import BrokenRow, MalformedDocument, MalformedRow, StoreError
from board_outbox.model.pause import HELD_OFFSET
from board_outbox.model.row_documents import (
    LEASE_HORIZON_SECONDS,
    ROW_STATES,
    done_latency,
    park_fields,
    row_summary,
)
from board_outbox.model.rows import (
    CANCELLED,
    CLAIMED,
    COALESCED,
    DONE,
    FAILED,
    LIVE_STATES,
    PENDING,
    EffectRow,
    born_due,
    new_row_doc,
)
from board_outbox.model.search import RowQuery
from board_outbox.model.times import TIME_MAX, TIME_MIN, due_limit
from board_outbox.model.validation import finite
from board_outbox.ports import (
    Claim,
    ClaimTerms,
    DoneLatency,
    FailedPage,
    RowFilter,
    RowIdentity,
    UpsertResult,
)

EFFECTS = "trigger_effects"
R = TypeVar("R")
_once = OnceLog(logging.getLogger("board_outbox.outbox"))
DUPLICATE_KEY = 11000
SCAN_CHUNK = 2000  # rows the stuck-row sweep's rolling unknown-state scan reads per sweep
# what the stuck-row sweep's statements may take together, server-side (``stuck_rows``)
SWEEP_BUDGET_SECONDS = 2.0
# The rows one statement names at most (``by_ids``): a write's server time grows with the rows it
# rewrites -- about 7 ms a row on the wire test server under load, where a lease beat over 703
# rows timed out at the 10 s op timeout -- so 100 rows keep a statement under a second there, a
# tenth of the default op timeout, and at a few milliseconds on mongod. More rows go out as
# more statements, one round trip each (the op timeout bounds each round trip).
ROW_CHUNK = 100
# the ``_id`` index, hinted on every write that names rows by ``_id``: mongod then never plans
# one on a state's partial index (whose bounds may hold a backlog)
BY_ID = [("_id", ASCENDING)]

# The rows of one state, as a filter its partial index serves (``schema.INDEXES``): the state,
# which implies the index's partial filter, plus a range over the index's key that holds every
# value a well-formed row has (any number; any date). A planner considers an index only for a
# query that constrains its key: a bare ``{state: X}`` would scan the collection, history and
# all. A row whose key field is malformed is not counted here: the stuck-row sweep parks it.
_ANY_NUMBER = {"$gte": float("-inf")}
IN_STATE: dict[str, dict[str, Any]] = {
    PENDING: {"state": PENDING, "not_before": _ANY_NUMBER},
    CLAIMED: {"state": CLAIMED, "lease_until": _ANY_NUMBER},
    FAILED: {"state": FAILED, "updated_at": _ANY_NUMBER},
    DONE: {"state": DONE, "done_at": {"$gte": datetime(1970, 1, 1, tzinfo=UTC)}},
    COALESCED: {"state": COALESCED, "done_at": {"$gte": datetime(1970, 1, 1, tzinfo=UTC)}},
    CANCELLED: {"state": CANCELLED, "done_at": {"$gte": datetime(1970, 1, 1, tzinfo=UTC)}},
}


# the pick's third query under a backlog: the key of the partial index on the pending rows of a
# priority above 0 (``schema``): highest priority first, then oldest due first
PRIORITY_ORDER = [("priority", DESCENDING), ("not_before", ASCENDING)]
PRIORITY_INDEX = "pending_priority_not_before"
# the pick's second query under a backlog: pending rows by (tenant, due time)
TENANT_INDEX = "pending_tenant_not_before"



def row_query(flt: RowFilter) -> dict[str, Any]:
    q: dict[str, Any] = {}
    if flt.tenant_id is not None:
        q["tenant_id"] = flt.tenant_id
    if flt.states:
        # one state: the filter its partial index serves (``IN_STATE``)
        if len(flt.states) == 1 and flt.states[0] in IN_STATE:
            q.update(IN_STATE[flt.states[0]])
        else:
            q["state"] = flt.states[0] if len(flt.states) == 1 else {"$in": list(flt.states)}
    if flt.kind is not None:
        # a row without ``kind`` is a launch (the zero value)
        q["kind"] = {"$in": ["launch", None]} if flt.kind == "launch" else flt.kind
    if flt.sub_ids:
        q["sub_id"] = flt.sub_ids[0] if len(flt.sub_ids) == 1 else {"$in": list(flt.sub_ids)}
    upd: dict[str, float] = {}
    if flt.updated_after is not None:
        upd["$gte"] = flt.updated_after
    if flt.updated_before is not None:
        upd["$lt"] = flt.updated_before
    if upd:
        q["updated_at"] = upd
    return q


def chunks(ids: Sequence[Any], size: int = ROW_CHUNK) -> list[list[Any]]:
    """``ids`` in runs of at most ``size``, in order."""
    return [list(ids[i:i + size]) for i in range(0, len(ids), size)]


def by_ids(ids: Sequence[Any], **fence: Any) -> dict[str, Any]:
    """The filter of a statement over these rows: ``_id`` first (the clause every planner serves
    from the ``_id`` index), then the fence (state, claim_id...), checked on each row it finds."""
    return {"_id": ids[0] if len(ids) == 1 else {"$in": list(ids)}, **fence}


def _packed(ops: Sequence[tuple[int, Any]]) -> list[list[Any]]:
    """Statements packed into commands (one ``bulk_write`` each) of at most ``ROW_CHUNK``
    rows."""
    out: list[list[Any]] = []
    rows = ROW_CHUNK
    for n, op in ops:
        if rows + n > ROW_CHUNK:
            out.append([])
            rows = 0
        out[-1].append(op)
        rows += n
    return out


class _Budget:
    """Statements sharing a time budget (``pymongo.timeout``: the server stops each at what is
    left). ``run`` returns None, said once per what, when the budget is spent or the statement
    ran out of it."""

    def __init__(self, seconds: float) -> None:
        self.until = time.monotonic() + seconds

    async def run(self, statement: Callable[..., Awaitable[R]], what: str) -> R | None:
        left = self.until - time.monotonic()
        if left <= 0:
            return None
        try:
            with pymongo.timeout(left):
                return await statement()
        except PyMongoError as exc:
            if not exc.timeout:
                raise
            _once(("budget", what), logging.WARNING,
                  "%s did not finish within the stuck-row sweep's budget (%gs) on this server: "
                  "it waits for the next sweep", what, SWEEP_BUDGET_SECONDS)
            return None


def _due(doc: dict[str, Any]) -> float:
    """A due row's ``not_before`` as a sort key (one that is not a finite number: first)."""
    due = finite(doc.get("not_before"))
    return -float("inf") if due is None else due


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


class MongoEffectOutbox:
    def __init__(self, db: Any) -> None:
        self.coll = db[EFFECTS]
        self._scan_after: Any = None  # where the rolling unknown-state scan goes on

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

    @translated
    async def apply_claimed(self, ref: Any, claim_id: str, t: T.Transition) -> bool:
        res = await self.coll.update_one(by_ids([ref], state=CLAIMED, claim_id=claim_id),
                                         update_of(t), hint=BY_ID)
        return bool(res.modified_count == 1)

    @translated
    async def apply_claimed_many(self, refs: Sequence[Any], claim_id: str, t: T.Transition) -> list[Any]:
        """One fenced ``update_many``; only when a lease was stolen from some of the rows, one
        more read to learn which ones this claim moved (the moved rows keep our claim_id)."""
        return await self.apply_marks([T.Mark(ref, claim_id, t) for ref in refs])

    @translated
    async def apply_marks(self, marks: Sequence[T.Mark]) -> list[Any]:
        """Unordered ``bulk_write``s of at most ``ROW_CHUNK`` rows each (one for a usual
        batch): an ``update_many`` per group of marks sharing a claim and a transition (a
        claim's projection rows, a lease beat), an ``update_one`` per other mark (a launch row's
        own outcome), each over ``_id``. Only when fewer rows moved than were marked, a read
        back learns which moved: those now in the transition's state under our claim_id (a
        retry after a write that landed finds its rows there too)."""
        if not marks:
            return []
        groups: dict[tuple[str, int], list[T.Mark]] = {}
        for m in marks:
            groups.setdefault((m.claim_id, id(m.t)), []).append(m)
        # (rows, statement), a group of more than ROW_CHUNK rows cut into several
        ops: list[tuple[int, UpdateOne | UpdateMany]] = []
        for group in groups.values():
            first = group[0]
            for part in chunks([m.ref for m in group]):
                fence = by_ids(part, state=CLAIMED, claim_id=first.claim_id)
                ops.append((len(part), UpdateOne(fence, update_of(first.t), hint=BY_ID)
                            if len(part) == 1 else
                            UpdateMany(fence, update_of(first.t), hint=BY_ID)))
        modified = 0
        for command in _packed(ops):
            try:
                res = await self.coll.bulk_write(command, ordered=False)
                modified += int(res.modified_count)
            except BulkWriteError as exc:
                if exc.details.get("writeConcernErrors"):
                    raise
                failed = exc.details.get("writeErrors") or [{}]
                raise StoreError(f"marks refused: {cap(failed[0].get('errmsg'), 500)}") from exc
        refs = [m.ref for m in marks]
        if modified == len(marks):
            return refs
        want = {m.ref: (m.claim_id, m.t.set.get("state", CLAIMED)) for m in marks}
        docs = await self.read_ids(refs, {"_id": 1, "state": 1, "claim_id": 1})
        moved = {d["_id"] for d in docs if want.get(d["_id"]) == (d.get("claim_id"), d.get("state"))}
        return [ref for ref in refs if ref in moved]

    async def read_ids(self, ids: Sequence[Any],
                       projection: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The documents of these rows, in the order named (a row that is gone: left out): one
        find by ``_id`` alone per ``ROW_CHUNK`` rows, which every planner serves from the
        ``_id`` index (a fence is checked by the caller on what comes back)."""
        found: dict[Any, dict[str, Any]] = {}
        for chunk in chunks(ids):
            for d in await self.coll.find(by_ids(chunk), projection).to_list(None):
                found[d["_id"]] = d
        return [found[i] for i in ids if i in found]

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
        """One query per way a live row can be stuck, each hinted to the partial index of its
        state that bounds it (the one mongod plans for it anyway): its cost is the rows in that
        state, never the done history. (As one ``$or``, a planner that plans no ``$or`` on an
        index scanned the collection.) A state outside the enum has no index that can find it:
        a rolling scan of the ``_id`` index, ``SCAN_CHUNK`` rows per sweep, looks for those (a
        lap over a million rows takes ``1e6 / SCAN_CHUNK`` sweeps).

        The sweep is housekeeping beside the worker's claims: its statements share
        ``SWEEP_BUDGET_SECONDS`` (a server-side time limit each); on a server where one cannot
        finish in that (a planner that walks a whole index, or scans the collection for an
        ``_id`` range), the rest waits for the next sweep, said once, instead of holding the
        worker and loading the store for as long as the scan takes."""
        not_number = {"$not": {"$type": "number"}}
        not_string = {"$not": {"$type": "string"}}
        queries = [
            ({"state": PENDING, "not_before": not_number}, "pending_not_before"),
            # R7: a due time no writer writes (past the stored-time range)
            ({"state": PENDING, "not_before": {"$gt": due_limit(now)}}, "pending_not_before"),
            ({**IN_STATE[PENDING], "tenant_id": not_string}, TENANT_INDEX),
            ({"state": CLAIMED, "lease_until": not_number}, "claimed_lease_until"),
            ({"state": CLAIMED, "lease_until": {"$gt": now + horizon}}, "claimed_lease_until"),
            ({**IN_STATE[CLAIMED], "tenant_id": not_string}, "claimed_lease_until"),
        ]
        docs: list[dict[str, Any]] = []
        seen: set[Any] = set()
        budget = _Budget(SWEEP_BUDGET_SECONDS)
        for q, index in queries:
            if len(docs) >= limit:
                break
            found = await budget.run(
                self.coll.find(q).hint(index).limit(limit - len(docs)).to_list,
                f"stuck-row query over {index}")
            if found is None:
                return [(d["_id"], d) for d in docs]
            for d in found:
                if d["_id"] not in seen:
                    seen.add(d["_id"])
                    docs.append(d)
        if len(docs) < limit:
            docs += await budget.run(lambda: self._unknown_states(limit - len(docs)),
                                     "unknown-state scan") or []
        return [(d["_id"], d) for d in docs]

    async def _unknown_states(self, limit: int) -> list[dict[str, Any]]:
        """The next ``SCAN_CHUNK`` rows by ``_id`` (the ObjectIds the service mints; at the end
        of a lap, the few rows whose ``_id`` is something else), and of those the ones whose
        state is outside the enum, read whole."""
        after = self._scan_after
        q = {"_id": {"$gt": after} if after is not None else {"$type": "objectId"}}
        page = await self.coll.find(q, {"state": 1}).sort("_id", 1).limit(SCAN_CHUNK).to_list(None)
        self._scan_after = page[-1]["_id"] if len(page) == SCAN_CHUNK else None
        if self._scan_after is None:  # a lap ends
            page += await self.coll.find({"_id": {"$not": {"$type": "objectId"}}},
                                         {"state": 1}).limit(SCAN_CHUNK).to_list(None)
        odd = [d["_id"] for d in page if d.get("state") not in ROW_STATES][:limit]
        if not odd:
            return []
        return await self.coll.find({"_id": {"$in": odd}}).to_list(None)  # type: ignore[no-any-return]

    @translated
    async def apply_failed(self, row_key: str, t: T.Transition, *,
                           updated_at: float | None = None) -> bool:
        q: dict[str, Any] = {"row_key": row_key, "state": FAILED}
        if updated_at is not None:
            q["updated_at"] = updated_at
        res = await self.coll.update_one(q, update_of(t))
        return bool(res.modified_count == 1)

    @translated
    async def failed_page(self, flt: RowFilter, after: Any = None) -> FailedPage:
        """One query over ``failed_updated_at_row_key`` (failed rows by ``(updated_at,
        row_key)``), as every operators' walk (``walks.state_page``)."""
        return await self.state_page(msgspec.structs.replace(flt, states=(FAILED,)), after)

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
    async def count_by_state(
        self, tenant_id: str | None = None, *, states: Collection[str] | None = None
    ) -> dict[str, int]:
        """Rows by state. With ``states``, one count per state (each served by that state's
        partial index: its cost is the rows in that state, never the history), except the done
        rows of every tenant, a week of history: the collection's estimated count (metadata on
        mongod) minus the other states' counts. Without ``states``, one aggregate over the
        tenant's rows (its ``tenant_seq`` prefix; every row when no tenant: the demo's check)."""
        if states is not None:
            out: dict[str, int] = {}
            estimate_done = tenant_id is None and DONE in states
            # estimating the done rows takes every other state's count
            counted = (set(ROW_STATES) | set(states)) - {DONE} if estimate_done else set(states)
            for state in sorted(counted):
                q: dict[str, Any] = dict(IN_STATE.get(state, {"state": state}))
                if tenant_id is not None:
                    q["tenant_id"] = tenant_id
                out[state] = int(await self.coll.count_documents(q))
            if estimate_done:
                out[DONE] = max(0, int(await self.coll.estimated_document_count())
                                - sum(out.values()))
            return {s: n for s, n in out.items() if n and s in states}
        pipeline: list[dict[str, Any]] = []
        if tenant_id is not None:
            pipeline.append({"$match": {"tenant_id": tenant_id}})
        pipeline.append({"$group": {"_id": "$state", "n": {"$sum": 1}}})
        cursor = await self.coll.aggregate(pipeline)
        return {str(d["_id"]): int(d["n"]) for d in await cursor.to_list(None)}

    @translated
    async def live_tenants(self) -> set[str]:
        """One ``distinct`` per live state, each over that state's partial index."""
        found: set[str] = set()
        for state in LIVE_STATES:
            found |= {str(t) for t in await self.coll.distinct("tenant_id", IN_STATE[state])
                      if isinstance(t, str)}
        return found

    @translated
    async def oldest_live_created_at(self, tenant_id: str) -> float | None:
        doc = await self.coll.find_one(
            {"tenant_id": tenant_id, "state": {"$in": list(LIVE_STATES)},
             "created_at": {"$gte": TIME_MIN, "$lte": TIME_MAX}},  # R7: a time, in range
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

    @translated
    async def release_held(self, now: float, keep: Collection[str]) -> int:
        """The held rows are read over the ``pending_not_before`` index from ``HELD_OFFSET``
        up (only held rows lie there, whatever the backlog of due ones; a filter of the state
        and that range alone, which every planner serves from the partial index: a clause on
        ``waiting`` beside it made one planner scan the collection); those whose pause is no
        longer on are released by ``_id``, ``ROW_CHUNK`` a statement, each fenced on still
        being held for that same pause."""
        held = {"state": PENDING, "not_before": {"$gte": HELD_OFFSET}}
        docs = await self.coll.find(held, {"_id": 1, "waiting": 1}).to_list(None)
        lifted: dict[str, list[Any]] = {}  # what a row waits on -> the rows
        for d in docs:
            why = d.get("waiting")
            if isinstance(why, str) and why not in keep:
                lifted.setdefault(why, []).append(d["_id"])
        moved = 0
        for why, ids in sorted(lifted.items()):
            for chunk in chunks(ids):
                res = await self.coll.update_many(
                    by_ids(chunk, **held, waiting=why),  # still held, for the same pause
                    {"$inc": {"not_before": -HELD_OFFSET},
                     "$set": {"waiting": None, "updated_at": now}}, hint=BY_ID)
                moved += int(res.modified_count)
        return moved

    # --- read-only: audit, replays, latency (A1, A4, A5) -----------------------------------------

    @translated
    async def rows_between(self, tenant_id: str, after_seq: int, upto_seq: int) -> list[RowIdentity]:
        """One query over the ``tenant_seq`` index; only the identifying fields come back."""
        docs = await self.coll.find(
            {"tenant_id": tenant_id, "seq": {"$gt": after_seq, "$lte": upto_seq}},
            {"_id": 0, "row_key": 1, "seq": 1, "kind": 1, "state": 1, "sub_id": 1, "projection": 1},
        ).sort([("seq", 1), ("row_key", 1)]).to_list(None)
        return [s for d in docs if (s := row_summary(d)) is not None]

    @translated
    async def existing_keys(self, row_keys: Collection[str]) -> set[str]:
        if not row_keys:
            return set()
        docs = await self.coll.find({"row_key": {"$in": list(row_keys)}},
                                    {"_id": 0, "row_key": 1}).to_list(None)
        return {d["row_key"] for d in docs if isinstance(d.get("row_key"), str)}

    @translated
    async def done_latencies(self, since: float, limit: int) -> list[DoneLatency]:
        """One query over the partial ``done_ttl`` index (state done, by done_at)."""
        docs = await self.coll.find(
            {"state": "done", "done_at": {"$gte": datetime.fromtimestamp(since, UTC)}},
            {"_id": 0, "tenant_id": 1, "kind": 1, "done_at": 1, "event.at": 1},
        ).sort("done_at", DESCENDING).limit(limit).to_list(None)
        return [lat for d in docs if (lat := done_latency(d)) is not None]

    def _burst_query(self, tenant_id: str, sub_id: str, card_id: str,
                     after_seq: int) -> dict[str, Any]:
        # the partial ``burst_sub_card_seq`` index: ``burst_at`` exists on coalescing rows only
        return {"tenant_id": tenant_id, "sub_id": sub_id, "event.card_id": card_id,
                "seq": {"$gt": after_seq}, "burst_at": {"$exists": True},
                "state": {"$in": [PENDING, CLAIMED, DONE]}}

    @translated
    async def newest_in_burst(self, tenant_id: str, sub_id: str, card_id: str,
                              after_seq: int) -> RowIdentity | None:
        """One query over the partial ``burst_sub_card_seq`` index, newest first: the first of
        the card's newer rows in a state that runs or ran; only the identifying fields."""
        docs = await self.coll.find(
            self._burst_query(tenant_id, sub_id, card_id, after_seq),
            {"_id": 0, "row_key": 1, "seq": 1, "kind": 1, "state": 1, "sub_id": 1},
        ).sort([("seq", DESCENDING)]).limit(1).to_list(1)
        return next((s for d in docs if (s := row_summary(d)) is not None), None)

    @translated
    async def covered_in_burst(self, tenant_id: str, sub_id: str, card_id: str,
                              after_seq: int) -> RowIdentity | None:
        q = self._burst_query(tenant_id, sub_id, card_id, after_seq)
        q["$or"] = [{"state": DONE}, {"burst_closed": True}]
        docs = await self.coll.find(
            q, {"_id": 0, "row_key": 1, "seq": 1, "kind": 1, "state": 1, "sub_id": 1},
        ).sort([("seq", ASCENDING)]).limit(1).to_list(1)
        return next((s for d in docs if (s := row_summary(d)) is not None), None)

    @translated
    async def carry_burst(self, row_key: str, *, burst_at: float, due_by: float, now: float,
                          close: bool = False) -> bool:
        update: dict[str, Any] = {"$min": {"burst_at": burst_at, "not_before": due_by},
                                  "$set": {"updated_at": now}}
        if close:
            update["$set"]["burst_closed"] = True
        res = await self.coll.update_one({"row_key": row_key, "state": PENDING}, update)
        return bool(res.matched_count == 1)

    @translated
    async def restart_burst(self, tenant_id: str, sub_id: str, card_id: str, after_seq: int,
                            *, at: float) -> int:
        res = await self.coll.update_many(
            {"tenant_id": tenant_id, "sub_id": sub_id, "event.card_id": card_id,
             "seq": {"$gt": after_seq}, "burst_at": {"$exists": True},
             "state": {"$in": list(LIVE_STATES)}},
            {"$max": {"burst_at": at}})
        return int(res.modified_count)

    @translated
    async def due_ahead(self, tenant_id: str, not_before: float, seq: int, limit: int) -> int:
        """One count over the partial ``pending_tenant_not_before`` index (both branches bound
        its key), stopped at ``limit``."""
        return int(await self.coll.count_documents(
            {"state": PENDING, "tenant_id": tenant_id,
             "$or": [{"not_before": {"$lt": not_before}},
                     {"not_before": not_before, "seq": {"$lt": seq}}]},
            limit=limit))

    # --- operators' bulk actions (A8) -----------------------------------------------------------

    @translated
    async def state_page(self, flt: RowFilter, after: Any = None) -> FailedPage:
        """``walks.state_page``: the row filter's query, one page of its state's walk."""
        q = row_query(RowFilter(tenant_id=flt.tenant_id, states=flt.states[:1], kind=flt.kind,
                                sub_ids=flt.sub_ids, updated_after=flt.updated_after,
                                updated_before=flt.updated_before))
        return await walks.state_page(self.coll, q, flt, after)

    @translated
    async def apply_unclaimed(self, row_key: str, t: T.Transition, *, state: str,
                              updated_at: float) -> bool:
        res = await self.coll.update_one({"row_key": row_key, "state": state,
                                          "updated_at": updated_at}, update_of(t))
        return bool(res.modified_count == 1)

    @translated
    async def search(self, q: RowQuery) -> list[EffectRow]:
        """``search.search_of``'s one query, hinted to its index."""
        flt, order, index = search.search_of(q, IN_STATE)
        cursor = self.coll.find(flt)
        if order is not None:
            cursor = cursor.sort(order)
        if index is not None:
            cursor = cursor.hint(index)
        out: list[EffectRow] = []
        for doc in await cursor.limit(q.limit).batch_size(q.limit).to_list(None):
            try:
                out.append(_decode(doc))
            except MalformedDocument:  # named through ``codec.unreadable``
                continue
        return out
