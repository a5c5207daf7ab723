"""What every statement over ``trigger_effects`` shares, whichever concern issues it: the
collection, the filter of each state (``IN_STATE``), the row filter (``row_query``), a transition
as an update document (``update_of``) and rows named by ``_id``.

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
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pymongo import ASCENDING

from board_outbox.model import transitions as T
from board_outbox.model.bad_documents import OnceLog
from board_outbox.model.codec import to_doc
from board_outbox.model.rows import CANCELLED, CLAIMED, COALESCED, DONE, FAILED, PENDING
from board_outbox.ports import RowFilter

EFFECTS = "trigger_effects"
_once = OnceLog(logging.getLogger("board_outbox.outbox"))
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


class OutboxCollection:
    """The collection every concern's mixin issues its statements to."""

    def __init__(self, db: Any) -> None:
        self.coll = db[EFFECTS]

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
