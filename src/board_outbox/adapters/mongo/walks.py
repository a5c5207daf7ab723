"""The operators' walks over ``trigger_effects`` (A8): a page of the rows of one state, as a bulk
replay, cancel or rerun reads them. Functions over the collection, called by
``MongoEffectOutbox``'s ``failed_page`` and ``state_page``.

Pending and failed rows are walked in ``(updated_at, row_key)`` order over their state's partial
index of that key (``pending_updated_at_row_key``, ``failed_updated_at_row_key``): the index's
bounds start at the position after the last page and its key is the sort, so a page costs its
own rows whatever came before (no skip, no sort stage). Done rows -- most of the history -- are
walked in ``_id`` order (hinted): one read of the collection over the whole walk, and no index
every done row would have to pay for."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING

from board_outbox.model.codec import from_doc
from board_outbox.model.errors import MalformedDocument, MalformedRow
from board_outbox.model.records import FailedPage, RowFilter
from board_outbox.model.rows import FAILED, PENDING, EffectRow

__all__ = ["KEYED_INDEXES", "WALK_ORDER", "state_page"]

# the walk order of the keyed states: the key of their partial indexes (``schema``)
WALK_ORDER = [("updated_at", ASCENDING), ("row_key", ASCENDING)]
KEYED_INDEXES = {PENDING: "pending_updated_at_row_key", FAILED: "failed_updated_at_row_key"}
BY_ID = [("_id", ASCENDING)]


async def state_page(coll: Any, query: dict[str, Any], flt: RowFilter,
                     after: Any = None) -> FailedPage:
    """One page of the rows ``query`` holds (the filter of ``flt``, whose one state names the
    walk), after the position ``after`` a previous page returned (the last document's stored
    values, sent back as they were read: an odd stored number never makes a walk read the same
    document twice)."""
    keyed = flt.states[0] in KEYED_INDEXES
    q = dict(query)
    q["row_key"] = {"$type": "string"}
    if keyed:
        q.setdefault("updated_at", {"$gte": float("-inf")})
        if after is not None:
            at, key = after  # at or past ``updated_after``: the last page's rows were
            q["updated_at"] = {**q["updated_at"], "$gte": at}
            q["$or"] = [{"updated_at": {"$gt": at}}, {"updated_at": at, "row_key": {"$gt": key}}]
        cursor = coll.find(q).sort(WALK_ORDER).hint(KEYED_INDEXES[flt.states[0]])
    else:
        q.pop("done_at", None)  # the TTL index's clause: this walk reads by _id
        if after is not None:
            q["_id"] = {"$gt": after}
        cursor = coll.find(q).sort(BY_ID).hint(BY_ID)
    # the whole page in the first reply (a find's first batch is 101 documents otherwise)
    docs = await cursor.limit(flt.limit).batch_size(flt.limit).to_list(None)
    rows: list[EffectRow] = []
    unreadable: list[str] = []
    for doc in docs:
        try:
            rows.append(from_doc(doc, EffectRow, MalformedRow))
        except MalformedDocument:
            unreadable.append(doc["row_key"])
    if not docs:
        last = after
    elif keyed:
        last = (docs[-1]["updated_at"], docs[-1]["row_key"])
    else:
        last = docs[-1]["_id"]
    return FailedPage(rows=rows, unreadable=unreadable, read=len(docs), after=last)
