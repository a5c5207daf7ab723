"""Rows in and claimed: the insert (born pending, or born claimed, adopting what an earlier
insert of ours left claimed), the claim of due rows across tenants (F1's pick, exact here: the
twin sees every due row) and the reclaim of expired leases."""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Collection, Sequence
from typing import Any

from anyio.lowlevel import checkpoint

from board_outbox.adapters.memory.outbox.rows import OutboxDocs, _apply, _number
from board_outbox.model import fairness
from board_outbox.model import transitions as T
from board_outbox.model.codec import to_doc
from board_outbox.model.errors import BrokenRow
from board_outbox.model.rows import CLAIMED, PENDING, EffectRow, born_due
from board_outbox.ports import Claim, ClaimTerms, UpsertResult


class OutboxClaims(OutboxDocs):
    """``upsert_rows``, ``claim_any``, ``reclaim_expired``."""

    async def upsert_rows(
        self, rows: Sequence[EffectRow], *, claim: ClaimTerms | None = None
    ) -> UpsertResult:
        await checkpoint()
        existing = 0
        claims: list[Claim] = []
        t = None if claim is None or not rows else T.claim(
            claim_id=claim.claim_id, now=rows[0].created_at, lease_until=claim.lease_until)
        ours = set() if claim is None else {claim.claim_id, *claim.adopt}
        for row in rows:
            if row.row_key in self._by_key:
                existing += 1
                ref = self._by_key[row.row_key]
                held = self._docs[ref]
                if (held.get("state") == CLAIMED and held.get("claim_id") in ours
                        and _number(held.get("lease_until"))):
                    # an earlier insert of ours whose answer was lost: ours to run
                    claims.append(T.claim_of(ref, held, claim_id=held["claim_id"],
                                             lease_until=held["lease_until"], reclaimed=False))
                continue
            ref = next(self._ids)
            doc = to_doc(row)
            if t is not None and claim is not None and born_due(row):  # coalescing rows wait
                doc.update(t.set, updated_at=row.updated_at)
                claims.append(T.claim_of_row(ref, row, t, claim_id=claim.claim_id,
                                             lease_until=claim.lease_until))
            self._docs[ref] = doc
            self._by_key[row.row_key] = ref
            self._track(ref)
        return UpsertResult(len(rows) - existing, existing, tuple(claims))

    async def claim_any(
        self, now: float, lease_seconds: float, limit: int, *,
        prefer: Collection[str] | None = None, steal_before: float | None = None,
        tenants: Collection[str] | None = None,
    ) -> list[Claim]:
        """Due rows oldest first, taken round-robin by tenant, each tenant's subscription rows
        highest priority first in the places they hold (F1, ``fairness.pick``): the twin sees
        every due row, so its pick is exact (a claim of ``limit`` takes at most the places of a
        tenant's ``limit`` oldest rows, filled from those and its ``limit`` highest-ranked
        subscription rows)."""
        await checkpoint()
        # per tenant: its oldest claimable row's (due time, ref), its ``limit`` oldest rows (the
        # places) and its highest-ranked subscription rows beyond them (``fairness.ranked``)
        candidates: list[tuple[tuple[float, int], list[dict[str, Any]], list[dict[str, Any]]]] = []
        ref_of: dict[int, int] = {}
        for tenant, refs in self._live.items():
            if tenants is not None and tenant not in tenants:
                continue
            stealable = prefer is None or tenant in prefer
            due: list[tuple[float, int, dict[str, Any]]] = []
            for ref in refs:
                doc = self._docs[ref]
                # as the server compares: a non-number never matches a numeric bound
                nb = doc.get("not_before")
                if doc.get("state") == PENDING and _number(nb) and nb <= now and (
                        stealable or fairness.stealable(doc, steal_before)):
                    due.append((nb, ref, doc))
            if due:
                places = heapq.nsmallest(limit, due, key=lambda d: (d[0], d[1]))
                held = {ref for _, ref, _ in places}
                top = heapq.nsmallest(limit, (d for d in due if d[1] not in held and
                                              fairness.rank_of(d[2]) is not None),
                                      key=lambda d: (-fairness.priority_of(d[2]), d[0], d[1]))
                ref_of.update((id(doc), ref) for _, ref, doc in places + top)
                candidates.append(((places[0][0], places[0][1]), [d for _, _, d in places],
                                   [d for _, _, d in sorted(top, key=lambda d: (d[0], d[1]))]))
        candidates.sort(key=lambda c: c[0])  # tenants by their oldest claimable row
        picked = fairness.pick((doc for _, rows, _ in candidates for doc in rows), limit,
                               prefer=prefer, steal_before=steal_before,
                               extra=(doc for _, _, more in candidates for doc in more))
        claims: list[Claim] = []
        claim_id = uuid.uuid4().hex
        lease_until = now + lease_seconds
        for doc in picked:
            ref = ref_of[id(doc)]
            _apply(doc, T.claim(claim_id=claim_id, now=now, lease_until=lease_until))
            claims.append(T.claim_of(ref, doc, claim_id=claim_id, lease_until=lease_until,
                                     reclaimed=False))
        return claims

    async def reclaim_expired(
        self, now: float, lease_seconds: float, limit: int, *,
        tenants: Collection[str] | None = None,
    ) -> list[Claim]:
        await checkpoint()
        lease_until = now + lease_seconds
        expired: list[int] = []
        for tenant, refs in self._live.items():
            if tenants is not None and tenant not in tenants:
                continue
            for ref in refs:
                lease = self._docs[ref].get("lease_until")
                if len(expired) < limit and self._docs[ref].get("state") == CLAIMED and \
                        _number(lease) and lease <= now:
                    expired.append(ref)
        # R1: a row whose document refuses the reclaim is named before any row is written (the
        # caller parks it and sweeps again); written first, the rows before it would be
        # reclaimed under claims nobody holds, left for a whole lease
        probe = T.reclaim(claim_id="", now=now, lease_until=lease_until)
        for ref in expired:
            problem = (T.refusal(self._docs[ref], probe)
                       or T.refusal(self._docs[ref], T.lease_expired(attempt=0, now=now)))
            if problem is not None:
                raise BrokenRow(ref, f"reclaim: {problem}")
        claims: list[Claim] = []
        for ref in expired:
            doc = self._docs[ref]
            claim_id = uuid.uuid4().hex
            _apply(doc, T.reclaim(claim_id=claim_id, now=now, lease_until=lease_until))
            _apply(doc, T.lease_expired(attempt=doc["attempts"], now=now))
            claims.append(T.claim_of(ref, doc, claim_id=claim_id, lease_until=lease_until,
                                     reclaimed=True))
        return claims
