"""The reads that list rows: one by key, a filter's page (newest first), the console's search,
the state walks of the dead letters and the bulk actions, and the identities the audit and the
replays compare with the events. Each document is decoded on its own: one that does not decode
costs only itself."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

import msgspec
from pymongo import DESCENDING

from board_outbox.adapters.mongo import search, walks
from board_outbox.adapters.mongo.errors import translated
from board_outbox.adapters.mongo.outbox.statements import IN_STATE, OutboxCollection, _once, row_query
from board_outbox.model.codec import from_doc
from board_outbox.model.errors import MalformedDocument, MalformedRow
from board_outbox.model.row_documents import row_summary
from board_outbox.model.rows import FAILED, EffectRow
from board_outbox.model.search import RowQuery
from board_outbox.ports import FailedPage, RowFilter, RowIdentity


def _decode(doc: dict[str, Any]) -> EffectRow:
    return from_doc(doc, EffectRow, MalformedRow)


class OutboxReads(OutboxCollection):
    """``get``, ``raw``, ``find``, ``search``, ``failed_page``, ``state_page``,
    ``rows_between``, ``existing_keys``."""

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

    # --- operators' bulk actions (A8) -----------------------------------------------------------

    @translated
    async def state_page(self, flt: RowFilter, after: Any = None) -> FailedPage:
        """``walks.state_page``: the row filter's query, one page of its state's walk."""
        q = row_query(RowFilter(tenant_id=flt.tenant_id, states=flt.states[:1], kind=flt.kind,
                                sub_ids=flt.sub_ids, updated_after=flt.updated_after,
                                updated_before=flt.updated_before))
        return await walks.state_page(self.coll, q, flt, after)

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
