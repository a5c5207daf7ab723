"""In-memory ``trigger_effects``: documents stored as plain dicts and decoded on read, exactly
like the Mongo adapter, so malformed rows can be planted and are handled the same way."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from anyio.lowlevel import checkpoint

from ..domain import (
    CLAIMED,
    DONE,
    FAILED,
    LIVE_STATES,
    PENDING,
    AuditEntry,
    EffectRow,
    ErrorEntry,
    from_doc,
    to_doc,
)
from ..errors import MalformedDocument, MalformedRow
from ..ports import Claim, RowFilter, UpsertResult


def _matches(doc: dict[str, Any], flt: RowFilter) -> bool:
    if flt.tenant_id is not None and doc.get("tenant_id") != flt.tenant_id:
        return False
    if flt.states and doc.get("state") not in flt.states:
        return False
    if flt.kind is not None and doc.get("kind", "launch") != flt.kind:
        return False
    upd = doc.get("updated_at", 0.0)
    if flt.updated_after is not None and not upd >= flt.updated_after:
        return False
    return not (flt.updated_before is not None and not upd < flt.updated_before)


class MemoryEffectOutbox:
    def __init__(self) -> None:
        self._docs: dict[int, dict[str, Any]] = {}
        self._by_key: dict[str, int] = {}
        self._live: dict[str, dict[int, None]] = {}  # tenant -> live refs, insertion ordered
        self._ids = itertools.count(1)

    # --- test helpers ------------------------------------------------------------------------

    def insert_raw(self, doc: dict[str, Any]) -> int:
        """Plant a document as-is (e.g. a malformed or legacy row without ``kind``)."""
        ref = next(self._ids)
        self._docs[ref] = dict(doc)
        if isinstance(doc.get("row_key"), str):
            self._by_key[doc["row_key"]] = ref
        self._track(ref)
        return ref

    def raw(self, row_key: str) -> dict[str, Any] | None:
        ref = self._by_key.get(row_key)
        return None if ref is None else self._docs[ref]

    def all_docs(self) -> list[dict[str, Any]]:
        return list(self._docs.values())

    def _track(self, ref: int) -> None:
        doc = self._docs[ref]
        tenant = doc.get("tenant_id")
        if not isinstance(tenant, str):
            return
        live = self._live.setdefault(tenant, {})
        if doc.get("state", PENDING) in LIVE_STATES:
            live[ref] = None
        else:
            live.pop(ref, None)

    # --- port ----------------------------------------------------------------------------------

    async def upsert_rows(self, rows: Sequence[EffectRow]) -> UpsertResult:
        await checkpoint()
        inserted = existing = 0
        for row in rows:
            if row.row_key in self._by_key:
                existing += 1
                continue
            ref = next(self._ids)
            self._docs[ref] = to_doc(row)
            self._by_key[row.row_key] = ref
            self._track(ref)
            inserted += 1
        return UpsertResult(inserted, existing)

    async def claim_due(
        self, tenant_id: str, now: float, lease_seconds: float, limit: int
    ) -> list[Claim]:
        await checkpoint()
        claims: list[Claim] = []
        for ref in list(self._live.get(tenant_id, {})):
            if len(claims) >= limit:
                break
            doc = self._docs[ref]
            state = doc.get("state")
            reclaimed = False
            if state == PENDING and doc.get("not_before", 0.0) <= now:
                pass
            elif state == CLAIMED and (doc.get("lease_until") or 0.0) <= now:
                reclaimed = True
            else:
                continue
            claim_id = uuid.uuid4().hex
            doc.update(state=CLAIMED, claim_id=claim_id, lease_until=now + lease_seconds)
            doc["updated_at"] = now
            if reclaimed:
                doc["attempts"] = doc.get("attempts", 0) + 1
                doc.setdefault("errors", []).append(
                    to_doc(
                        ErrorEntry(
                            attempt=doc["attempts"],
                            at=now,
                            error="lease expired before the attempt finished",
                            kind="lease_expired",
                        )
                    )
                )
            claims.append(self._claim(ref, doc, claim_id, now + lease_seconds, reclaimed))
        return claims

    @staticmethod
    def _claim(
        ref: Any, doc: dict[str, Any], claim_id: str, lease_until: float, reclaimed: bool
    ) -> Claim:
        row: EffectRow | None = None
        err: str | None = None
        try:
            row = from_doc(doc, EffectRow, MalformedRow)
        except MalformedDocument as exc:
            err = str(exc)
        return Claim(
            ref=ref,
            claim_id=claim_id,
            lease_until=lease_until,
            tenant_id=str(doc.get("tenant_id")),
            row=row,
            decode_error=err,
            reclaimed=reclaimed,
        )

    def _fenced(self, ref: Any, claim_id: str) -> dict[str, Any] | None:
        doc = self._docs.get(ref)
        if doc is None or doc.get("state") != CLAIMED or doc.get("claim_id") != claim_id:
            return None
        return doc

    async def mark_consumed(self, ref: Any, claim_id: str, now: float) -> bool:
        await checkpoint()
        doc = self._fenced(ref, claim_id)
        if doc is None:
            return False
        doc.update(consume_marked=True, updated_at=now)
        return True

    async def mark_done(self, ref: Any, claim_id: str, now: float, outcome: str) -> bool:
        await checkpoint()
        doc = self._fenced(ref, claim_id)
        if doc is None:
            return False
        doc.update(
            state=DONE,
            outcome=outcome,
            updated_at=now,
            lease_until=None,
            done_at=datetime.fromtimestamp(now, UTC),
        )
        self._track(ref)
        return True

    async def mark_retry(
        self, ref: Any, claim_id: str, now: float, error: ErrorEntry, not_before: float
    ) -> bool:
        await checkpoint()
        doc = self._fenced(ref, claim_id)
        if doc is None:
            return False
        doc.update(state=PENDING, not_before=not_before, lease_until=None, updated_at=now)
        doc["attempts"] = doc.get("attempts", 0) + 1
        doc.setdefault("errors", []).append(to_doc(error))
        self._track(ref)
        return True

    async def mark_failed(
        self, ref: Any, claim_id: str, now: float, error: ErrorEntry, count_attempt: bool
    ) -> bool:
        await checkpoint()
        doc = self._fenced(ref, claim_id)
        if doc is None:
            return False
        doc.update(state=FAILED, lease_until=None, updated_at=now, outcome="failed")
        if count_attempt:
            doc["attempts"] = doc.get("attempts", 0) + 1
        doc.setdefault("errors", []).append(to_doc(error))
        self._track(ref)
        return True

    async def release(self, ref: Any, claim_id: str, now: float) -> bool:
        await checkpoint()
        doc = self._fenced(ref, claim_id)
        if doc is None:
            return False
        doc.update(state=PENDING, claim_id=None, lease_until=None, updated_at=now)
        self._track(ref)
        return True

    async def get(self, row_key: str) -> EffectRow | None:
        await checkpoint()
        ref = self._by_key.get(row_key)
        return None if ref is None else from_doc(self._docs[ref], EffectRow, MalformedRow)

    async def find(self, flt: RowFilter) -> list[EffectRow]:
        await checkpoint()
        docs = [d for d in self._docs.values() if _matches(d, flt)]
        docs.sort(key=lambda d: (d.get("updated_at", 0.0), str(d.get("row_key"))), reverse=True)
        out: list[EffectRow] = []
        for d in docs[: flt.limit]:
            try:
                out.append(from_doc(d, EffectRow, MalformedRow))
            except MalformedDocument:
                continue
        return out

    async def count_by_state(self, tenant_id: str | None = None) -> dict[str, int]:
        await checkpoint()
        counts: dict[str, int] = {}
        for d in self._docs.values():
            if tenant_id is None or d.get("tenant_id") == tenant_id:
                st = str(d.get("state"))
                counts[st] = counts.get(st, 0) + 1
        return counts

    async def live_tenants(self) -> set[str]:
        await checkpoint()
        return {t for t, refs in self._live.items() if refs}

    async def replay(self, row_key: str, now: float, by: str) -> bool:
        await checkpoint()
        ref = self._by_key.get(row_key)
        if ref is None or self._docs[ref].get("state") != FAILED:
            return False
        doc = self._docs[ref]
        doc.update(
            state=PENDING, attempts=0, not_before=now, claim_id=None, lease_until=None,
            updated_at=now, outcome=None,
        )
        doc.setdefault("audit", []).append(
            to_doc(AuditEntry(at=now, action="replay", by=by, detail="attempts reset"))
        )
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
