"""The reads that list rows: one by key, a filter's page (newest first, in the server's order
over any stored values), the console's search, the state walks of the dead letters and the
bulk actions, and the identities the audit and the replays compare with the events."""

from __future__ import annotations

import heapq
import logging
from collections.abc import Collection
from datetime import datetime
from typing import Any

import msgspec
from anyio.lowlevel import checkpoint

from board_outbox.adapters.memory.outbox.rows import OutboxDocs, _decode, _matches, _number, _once
from board_outbox.model.errors import MalformedDocument
from board_outbox.model.row_documents import row_summary
from board_outbox.model.rows import CANCELLED, CLAIMED, COALESCED, DONE, FAILED, PENDING, EffectRow
from board_outbox.model.search import RowQuery
from board_outbox.ports import FailedPage, RowFilter, RowIdentity


def _newest_first(doc: dict[str, Any]) -> tuple[int, float, str, str]:
    """The server's descending ``(updated_at, row_key)`` order over any stored values: a
    missing or null time lowest, then numbers, then anything else (by its text)."""
    upd = doc.get("updated_at")
    if upd is None:
        return (0, 0.0, "", str(doc.get("row_key")))
    if _number(upd):
        return (1, float(upd), "", str(doc.get("row_key")))
    return (2, 0.0, str(upd), str(doc.get("row_key")))


class OutboxReads(OutboxDocs):
    """``get``, ``find``, ``search``, ``failed_page``, ``state_page``, ``rows_between``,
    ``existing_keys`` (``raw`` is the store's)."""

    async def get(self, row_key: str) -> EffectRow | None:
        await checkpoint()
        ref = self._by_key.get(row_key)
        return None if ref is None else _decode(self._docs[ref])

    async def find(self, flt: RowFilter) -> list[EffectRow]:
        await checkpoint()
        docs = [d for d in self._docs.values() if _matches(d, flt)]
        docs.sort(key=_newest_first, reverse=True)
        out: list[EffectRow] = []
        for d in docs[: flt.limit]:
            try:
                out.append(_decode(d))
            except MalformedDocument as exc:  # R2: left out of the listing, but said so once
                _once(("find", id(d)), logging.WARNING,
                      "a row that does not decode is left out: %s", exc)
        return out

    async def failed_page(self, flt: RowFilter, after: Any = None) -> FailedPage:
        """As the Mongo adapter's walk: failed rows with a numeric ``updated_at`` and a string
        ``row_key``, in ``(updated_at, row_key)`` order, after ``after``."""
        await checkpoint()
        return self._walk(msgspec.structs.replace(flt, states=(FAILED,)), after, by_time=True)

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
                rows.append(_decode(d))
            except MalformedDocument:
                unreadable.append(d["row_key"])
        return FailedPage(rows=rows, unreadable=unreadable, read=len(page),
                          after=page[-1][0] if page else after)

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
                out.append(_decode(d))
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
