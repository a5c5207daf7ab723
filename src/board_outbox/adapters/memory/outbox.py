"""In-memory ``trigger_effects``: documents stored as plain dicts and decoded on read, exactly
like the Mongo adapter, so malformed rows can be planted and are handled the same way."""

from __future__ import annotations

import heapq
import itertools
import logging
import uuid
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, TypeGuard

import msgspec
from anyio.lowlevel import checkpoint

from board_outbox.model import fairness
from board_outbox.model import transitions as T
from board_outbox.model.bad_documents import OnceLog
from board_outbox.model.codec import from_doc, to_doc
from board_outbox.model.errors import BrokenRow, MalformedDocument, MalformedRow, StoreError
from board_outbox.model.pause import HELD_OFFSET
from board_outbox.model.row_documents import (
    LEASE_HORIZON_SECONDS,
    done_latency,
    park_fields,
    row_summary,
    stuck_reason,
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
)
from board_outbox.model.search import RowQuery
from board_outbox.model.times import stamp
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

_once = OnceLog(logging.getLogger("board_outbox.outbox"))

def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _matches(doc: dict[str, Any], flt: RowFilter) -> bool:
    if flt.tenant_id is not None and doc.get("tenant_id") != flt.tenant_id:
        return False
    if flt.states and doc.get("state") not in flt.states:
        return False
    if flt.kind is not None and doc.get("kind", "launch") != flt.kind:
        return False
    if flt.sub_ids and doc.get("sub_id") not in flt.sub_ids:
        return False
    upd = doc.get("updated_at", 0.0)
    if (flt.updated_after is not None or flt.updated_before is not None) and not _number(upd):
        return False  # as the server: a time bound matches numbers only (a string is no time)
    if flt.updated_after is not None and not upd >= flt.updated_after:
        return False
    return not (flt.updated_before is not None and not upd < flt.updated_before)


def _newest_first(doc: dict[str, Any]) -> tuple[int, float, str, str]:
    """The server's descending ``(updated_at, row_key)`` order over any stored values: a
    missing or null time lowest, then numbers, then anything else (by its text)."""
    upd = doc.get("updated_at")
    if upd is None:
        return (0, 0.0, "", str(doc.get("row_key")))
    if _number(upd):
        return (1, float(upd), "", str(doc.get("row_key")))
    return (2, 0.0, str(upd), str(doc.get("row_key")))


def _check(doc: dict[str, Any], t: T.Transition) -> None:
    """Like the server, refuse ``$inc`` on a non-number and ``$push`` onto a non-array
    (StoreError, ``transitions.refusal``)."""
    problem = T.refusal(doc, t)
    if problem is not None:
        raise StoreError(problem)


def _apply(doc: dict[str, Any], t: T.Transition) -> None:
    """A transition as a dict update; a refused one (``_check``) changes nothing."""
    _check(doc, t)
    doc.update(t.set)
    if t.count_attempt:
        doc["attempts"] = doc.get("attempts", 0) + 1
    if t.error is not None:
        doc.setdefault("errors", []).append(to_doc(t.error))
    if t.audit is not None:
        doc.setdefault("audit", []).append(to_doc(t.audit))


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

    def delete_raw(self, row_key: str) -> bool:
        """Delete a row behind the service's back (what the completeness audit must find)."""
        ref = self._by_key.pop(row_key, None)
        if ref is None:
            return False
        doc = self._docs.pop(ref)
        tenant = doc.get("tenant_id")
        if isinstance(tenant, str):
            self._live.get(tenant, {}).pop(ref, None)
        return True

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

    async def stuck_rows(
        self, now: float, limit: int, horizon: float = LEASE_HORIZON_SECONDS
    ) -> list[tuple[Any, dict[str, Any]]]:
        await checkpoint()
        return [(ref, dict(d)) for ref, d in self._docs.items()
                if stuck_reason(d, now, horizon) is not None][:limit]

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

    async def get(self, row_key: str) -> EffectRow | None:
        await checkpoint()
        ref = self._by_key.get(row_key)
        return None if ref is None else from_doc(self._docs[ref], EffectRow, MalformedRow)

    async def find(self, flt: RowFilter) -> list[EffectRow]:
        await checkpoint()
        docs = [d for d in self._docs.values() if _matches(d, flt)]
        docs.sort(key=_newest_first, reverse=True)
        out: list[EffectRow] = []
        for d in docs[: flt.limit]:
            try:
                out.append(from_doc(d, EffectRow, MalformedRow))
            except MalformedDocument as exc:  # R2: left out of the listing, but said so once
                _once(("find", id(d)), logging.WARNING,
                      "a row that does not decode is left out: %s", exc)
        return out

    async def failed_page(self, flt: RowFilter, after: Any = None) -> FailedPage:
        """As the Mongo adapter's walk: failed rows with a numeric ``updated_at`` and a string
        ``row_key``, in ``(updated_at, row_key)`` order, after ``after``."""
        await checkpoint()
        return self._walk(msgspec.structs.replace(flt, states=(FAILED,)), after, by_time=True)

    async def count_by_state(
        self, tenant_id: str | None = None, *, states: Collection[str] | None = None
    ) -> dict[str, int]:
        await checkpoint()
        counts: dict[str, int] = {}
        for d in self._docs.values():
            if tenant_id is None or d.get("tenant_id") == tenant_id:
                st = str(d.get("state"))
                if states is None or st in states:
                    counts[st] = counts.get(st, 0) + 1
        return counts

    async def live_tenants(self) -> set[str]:
        await checkpoint()
        return {t for t, refs in self._live.items() if refs}

    async def oldest_live_created_at(self, tenant_id: str) -> float | None:
        await checkpoint()
        ats = [at for ref in self._live.get(tenant_id, ())
               if ref in self._docs and self._docs[ref].get("state") in LIVE_STATES
               and (at := stamp(self._docs[ref].get("created_at"))) is not None]  # R7
        return min(ats) if ats else None

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

    # --- read-only: audit, replays, latency (A1, A4, A5) -----------------------------------------

    async def rows_between(self, tenant_id: str, after_seq: int, upto_seq: int) -> list[RowIdentity]:
        await checkpoint()
        out = [s for d in self._docs.values() if d.get("tenant_id") == tenant_id
               and (s := row_summary(d)) is not None and after_seq < s.seq <= upto_seq]
        out.sort(key=lambda s: (s.seq, s.row_key))
        return out

    async def existing_keys(self, row_keys: Collection[str]) -> set[str]:
        await checkpoint()
        return {k for k in row_keys if k in self._by_key and self._by_key[k] in self._docs}

    async def done_latencies(self, since: float, limit: int) -> list[DoneLatency]:
        await checkpoint()
        done = [d for d in self._docs.values() if d.get("state") == DONE
                and isinstance(d.get("done_at"), datetime) and d["done_at"].timestamp() >= since]
        done.sort(key=lambda d: d["done_at"], reverse=True)
        return [lat for d in done[:limit] if (lat := done_latency(d)) is not None]

    def _burst_rows(self, tenant_id: str, sub_id: str, card_id: str,
                    after_seq: int) -> list[tuple[RowIdentity, dict[str, Any]]]:
        out = []
        for d in self._docs.values():
            ev = d.get("event")
            if (d.get("tenant_id") != tenant_id or d.get("sub_id") != sub_id
                    or d.get("burst_at") is None or not isinstance(ev, dict)
                    or ev.get("card_id") != card_id
                    or d.get("state") not in (PENDING, CLAIMED, DONE)):
                continue
            s = row_summary(d)
            if s is not None and s.seq > after_seq:
                out.append((s, d))
        out.sort(key=lambda sd: sd[0].seq)
        return out

    async def newest_in_burst(self, tenant_id: str, sub_id: str, card_id: str,
                              after_seq: int) -> RowIdentity | None:
        await checkpoint()
        rows = self._burst_rows(tenant_id, sub_id, card_id, after_seq)
        return rows[-1][0] if rows else None

    async def covered_in_burst(self, tenant_id: str, sub_id: str, card_id: str,
                              after_seq: int) -> RowIdentity | None:
        await checkpoint()
        return next((s for s, d in self._burst_rows(tenant_id, sub_id, card_id, after_seq)
                     if d.get("burst_closed") is True or s.state == DONE), None)

    async def carry_burst(self, row_key: str, *, burst_at: float, due_by: float, now: float,
                          close: bool = False) -> bool:
        await checkpoint()
        ref = self._by_key.get(row_key)
        doc = None if ref is None else self._docs.get(ref)
        if doc is None or doc.get("state") != PENDING:
            return False
        doc["burst_at"] = min(float(doc.get("burst_at", burst_at)), burst_at)
        doc["not_before"] = min(float(doc.get("not_before", due_by)), due_by)
        doc["updated_at"] = now
        if close:
            doc["burst_closed"] = True
        return True

    async def restart_burst(self, tenant_id: str, sub_id: str, card_id: str, after_seq: int,
                            *, at: float) -> int:
        await checkpoint()
        n = 0
        for d in self._docs.values():
            ev, seq, burst = d.get("event"), d.get("seq"), d.get("burst_at")
            if (d.get("tenant_id") == tenant_id and d.get("sub_id") == sub_id
                    and d.get("state") in LIVE_STATES and _number(burst) and _number(seq)
                    and seq > after_seq and isinstance(ev, dict) and ev.get("card_id") == card_id):
                d["burst_at"] = max(burst, at)
                n += 1
        return n

    async def due_ahead(self, tenant_id: str, not_before: float, seq: int, limit: int) -> int:
        await checkpoint()
        n = 0
        for d in self._docs.values():
            nb, s = finite(d.get("not_before")), d.get("seq")
            if (d.get("state") == PENDING and d.get("tenant_id") == tenant_id and nb is not None
                    and (nb < not_before or (nb == not_before and _number(s) and s < seq))):
                n += 1
                if n >= limit:
                    break
        return n

    # --- operators' bulk actions (A8) -----------------------------------------------------------

    async def state_page(self, flt: RowFilter, after: Any = None) -> FailedPage:
        """As the Mongo adapter's walks: pending (and failed) rows in ``(updated_at, row_key)``
        order, any other state in insertion order (the ``_id`` walk), after ``after``."""
        await checkpoint()
        return self._walk(flt, after, by_time=flt.states[0] in (PENDING, FAILED))

    def _walk(self, flt: RowFilter, after: Any, *, by_time: bool) -> FailedPage:
        """One page of the rows in ``flt.states[0]`` with a numeric ``updated_at`` and a string
        ``row_key``, keyed by ``(updated_at, row_key)`` (``by_time``) or by insertion, after
        ``after``; each row decoded on its own (one that does not is named, not returned)."""
        state = flt.states[0]
        keyed: list[tuple[Any, dict[str, Any]]] = []
        for ref, d in self._docs.items():
            if not (d.get("state") == state and _number(d.get("updated_at"))
                    and isinstance(d.get("row_key"), str) and _matches(d, flt)):
                continue
            key: Any = (d["updated_at"], d["row_key"]) if by_time else ref
            if after is None or key > after:
                keyed.append((key, d))
        page = heapq.nsmallest(flt.limit, keyed, key=lambda kd: kd[0])
        rows: list[EffectRow] = []
        unreadable: list[str] = []
        for _key, d in page:
            try:
                rows.append(from_doc(d, EffectRow, MalformedRow))
            except MalformedDocument:
                unreadable.append(d["row_key"])
        return FailedPage(rows=rows, unreadable=unreadable, read=len(page),
                          after=page[-1][0] if page else after)

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

    async def search(self, q: RowQuery) -> list[EffectRow]:
        """As the Mongo adapter's query of each form, in the same order (newest first)."""
        await checkpoint()
        if q.form == "row_key":
            ref = self._by_key.get(q.row_key or "")
            docs = [] if ref is None else [self._docs[ref]]
        else:
            docs = [d for d in self._docs.values() if _searched(d, q)]
            field = "seq" if q.form != "state" or (q.state == DONE and q.tenant) else \
                _STATE_ORDER[q.state or ""]
            docs = heapq.nlargest(q.limit, docs, key=lambda d: _sort_key(d.get(field)))
        out: list[EffectRow] = []
        for d in docs[:q.limit]:
            try:
                out.append(from_doc(d, EffectRow, MalformedRow))
            except MalformedDocument:  # named through ``codec.unreadable``
                continue
        return out


# a state's search order, newest first (the key of its partial index, as the Mongo adapter's)
_STATE_ORDER = {PENDING: "not_before", CLAIMED: "lease_until", FAILED: "updated_at",
                DONE: "done_at", COALESCED: "done_at", CANCELLED: "done_at"}


def _sort_key(value: Any) -> tuple[int, float]:
    if isinstance(value, datetime):
        return (1, value.timestamp())
    return (1, float(value)) if _number(value) else (0, 0.0)


def _searched(d: dict[str, Any], q: RowQuery) -> bool:
    if q.tenant is not None and d.get("tenant_id") != q.tenant:
        return False
    if q.form == "card":
        ev = d.get("event")
        return isinstance(ev, dict) and ev.get("card_id") == q.card
    if q.form in ("event", "seq_range"):
        seq = d.get("seq")
        return (_number(seq) and q.seq_from is not None and q.seq_to is not None
                and q.seq_from <= seq <= q.seq_to)
    return d.get("state") == q.state
