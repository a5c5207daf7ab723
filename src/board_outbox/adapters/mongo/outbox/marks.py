"""The writes that move a row on: the marks fenced on the claim that holds the row (one, a
claim's worth, a batch in ``bulk_write``s), parking a broken row, and the writes outside a
claim, each fenced on what its caller read (a dead letter retried, the operators' bulk actions
on a row's state and time, held rows released while their pause still holds them, dead letters
purged)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from pymongo import UpdateMany, UpdateOne
from pymongo.errors import BulkWriteError

from board_outbox.adapters.mongo.errors import translated
from board_outbox.adapters.mongo.outbox.statements import (
    BY_ID,
    ROW_CHUNK,
    OutboxCollection,
    by_ids,
    chunks,
    row_query,
    update_of,
)
from board_outbox.model import transitions as T
from board_outbox.model.bad_documents import cap
from board_outbox.model.errors import StoreError
from board_outbox.model.pause import HELD_OFFSET
from board_outbox.model.row_documents import park_fields
from board_outbox.model.rows import CLAIMED, FAILED, PENDING
from board_outbox.ports import RowFilter


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


class OutboxMarks(OutboxCollection):
    """``apply_claimed``, ``apply_claimed_many``, ``apply_marks``, ``park_broken``,
    ``apply_failed``, ``apply_unclaimed``, ``purge``, ``release_held``."""

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
    async def apply_failed(self, row_key: str, t: T.Transition, *,
                           updated_at: float | None = None) -> bool:
        q: dict[str, Any] = {"row_key": row_key, "state": FAILED}
        if updated_at is not None:
            q["updated_at"] = updated_at
        res = await self.coll.update_one(q, update_of(t))
        return bool(res.modified_count == 1)

    @translated
    async def apply_unclaimed(self, row_key: str, t: T.Transition, *, state: str,
                              updated_at: float) -> bool:
        res = await self.coll.update_one({"row_key": row_key, "state": state,
                                          "updated_at": updated_at}, update_of(t))
        return bool(res.modified_count == 1)

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
