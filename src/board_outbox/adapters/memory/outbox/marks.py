"""The writes that move a row on: the marks fenced on the claim that holds the row, parking a
broken row, and the writes outside a claim, each fenced on what its caller read (a dead letter
retried, the operators' bulk actions, held rows released, dead letters purged)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from anyio.lowlevel import checkpoint

from board_outbox.adapters.memory.outbox.rows import OutboxDocs, _apply, _check, _matches, _number
from board_outbox.model import transitions as T
from board_outbox.model.pause import HELD_OFFSET
from board_outbox.model.row_documents import park_fields
from board_outbox.model.rows import CLAIMED, FAILED, PENDING
from board_outbox.ports import RowFilter


class OutboxMarks(OutboxDocs):
    """``apply_claimed``, ``apply_claimed_many``, ``apply_marks``, ``park_broken``,
    ``apply_failed``, ``apply_unclaimed``, ``purge``, ``release_held``."""

    def _fenced(self, ref: Any, claim_id: str) -> dict[str, Any] | None:
        doc = self._docs.get(ref)
        if doc is None or doc.get("state") != CLAIMED or doc.get("claim_id") != claim_id:
            return None
        return doc

    async def apply_claimed(self, ref: Any, claim_id: str, t: T.Transition) -> bool:
        await checkpoint()
        doc = self._fenced(ref, claim_id)
        if doc is None:
            return False
        _apply(doc, t)
        self._track(ref)
        return True

    async def apply_claimed_many(self, refs: Sequence[Any], claim_id: str, t: T.Transition) -> list[Any]:
        return await self.apply_marks([T.Mark(ref, claim_id, t) for ref in refs])

    async def apply_marks(self, marks: Sequence[T.Mark]) -> list[Any]:
        """As the Mongo adapter: every mark in one go; a refusal raises before any is applied."""
        await checkpoint()
        for m in marks:  # the store refuses the whole write before anything changes
            doc = self._fenced(m.ref, m.claim_id)
            if doc is not None:
                _check(doc, m.t)
        moved: list[Any] = []
        for m in marks:
            doc = self._fenced(m.ref, m.claim_id)
            if doc is None:
                # as the Mongo adapter's read back: a row already moved to the mark's state under
                # its claim (a retry of a write that landed) counts as moved
                was = self._docs.get(m.ref)
                if was is not None and was.get("claim_id") == m.claim_id and \
                        was.get("state") == m.t.set.get("state", CLAIMED):
                    moved.append(m.ref)
                continue
            _apply(doc, m.t)
            self._track(m.ref)
            moved.append(m.ref)
        return moved

    async def park_broken(
        self, ref: Any, now: float, error: str, *, claim_id: str | None = None
    ) -> bool:
        await checkpoint()
        doc = self._docs.get(ref)
        if doc is None or (claim_id is not None and doc.get("claim_id") != claim_id):
            return False
        doc.update(park_fields(doc, now=now, error=error))
        if isinstance(doc.get("row_key"), str):
            self._by_key[doc["row_key"]] = ref
        self._track(ref)
        return True

    async def apply_failed(self, row_key: str, t: T.Transition, *,
                           updated_at: float | None = None) -> bool:
        await checkpoint()
        ref = self._by_key.get(row_key)
        if ref is None or self._docs[ref].get("state") != FAILED:
            return False
        if updated_at is not None and not (_number(was := self._docs[ref].get("updated_at"))
                                           and was == updated_at):
            return False
        _apply(self._docs[ref], t)
        self._track(ref)
        return True

    async def apply_unclaimed(self, row_key: str, t: T.Transition, *, state: str,
                              updated_at: float) -> bool:
        await checkpoint()
        ref = self._by_key.get(row_key)
        if ref is None:
            return False
        doc = self._docs[ref]
        if doc.get("state") != state or not (_number(was := doc.get("updated_at"))
                                             and was == updated_at):
            return False
        _apply(doc, t)
        self._track(ref)
        return True

    async def purge(self, flt: RowFilter) -> int:
        await checkpoint()
        victims = [
            ref
            for ref, d in self._docs.items()
            if d.get("state") == FAILED and _matches(d, flt)
        ][: flt.limit]
        for ref in victims:
            doc = self._docs.pop(ref)
            self._by_key.pop(doc.get("row_key"), None)  # type: ignore[arg-type]
        return len(victims)

    async def release_held(self, now: float, keep: Collection[str]) -> int:
        await checkpoint()
        moved = 0
        for doc in self._docs.values():
            nb, why = doc.get("not_before"), doc.get("waiting")
            # as the server compares: a non-number never matches the numeric bound
            if doc.get("state") == PENDING and _number(nb) and nb >= HELD_OFFSET and \
                    isinstance(why, str) and why not in keep:
                doc.update(not_before=nb - HELD_OFFSET, waiting=None, updated_at=now)
                moved += 1
        return moved
