"""The per-tenant status figures (O1-O3, ``StatusStore``): one aggregate over ``trigger_effects``
for every tenant's rows, one indexed read per lagging tenant for the first event past its
cursor (bounded by the caller), and the console's page of tenants that need a look, sorted and
cut in the store."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import anyio
from pymongo import ASCENDING

from board_outbox.adapters.mongo.cursors import CURSORS
from board_outbox.adapters.mongo.errors import translated
from board_outbox.adapters.mongo.events import COUNTERS, EVENTS
from board_outbox.adapters.mongo.outbox.statements import EFFECTS, IN_STATE
from board_outbox.model.pause import HELD_OFFSET
from board_outbox.model.records import AttentionPage, TenantLag
from board_outbox.model.rows import FAILED, LIVE_STATES, PENDING
from board_outbox.model.times import TIME_MAX, TIME_MIN
from board_outbox.model.validation import finite, is_seq
from board_outbox.ports import RowSummary

# first events past a cursor read at once (each one indexed read on tenant_id, seq)
CONCURRENT_READS = 8
# a numeric seq (one query operator, cheap on every server); a string or a missing seq counts
# as absent here, and the page keeps only true integers (is_seq)
_NUMBER = {"seq": {"$type": "number"}}


# a row's created_at when it is a time in range (R7), else null, which $min passes over: one
# row's -1e15 never becomes its tenant's oldest pending row
_IN_RANGE_CREATED = {"$cond": [{"$and": [{"$gte": ["$created_at", TIME_MIN]},
                                         {"$lte": ["$created_at", TIME_MAX]}]},
                               "$created_at", None]}


class MongoStatusStore:
    def __init__(self, db: Any) -> None:
        self.effects = db[EFFECTS]
        self.events = db[EVENTS]
        self.counters = db[COUNTERS]

    @translated
    async def row_summary(self, tenants: Collection[str] | None = None,
                          states: Collection[str] | None = None) -> dict[str, RowSummary]:
        """``tenants``: only theirs (the tenant index); ``states``: only the rows in those
        states, each state's clause served by its partial index (``IN_STATE``); neither: every
        row (the history too)."""
        flt: dict[str, Any] = {}
        if tenants is not None:
            flt["tenant_id"] = {"$in": list(tenants)}
        if states is not None:
            flt["$or"] = [IN_STATE.get(s, {"state": s}) for s in sorted(states)]
        match = [{"$match": flt}] if flt else []
        cursor = await self.effects.aggregate([
            *match,
            {"$group": {"_id": {"t": "$tenant_id", "s": "$state"}, "n": {"$sum": 1},
                        "oldest": {"$min": _IN_RANGE_CREATED},
                        # F2: rows that carry a reason they wait on a limit
                        "waiting": {"$sum": {"$cond": [{"$ifNull": ["$waiting", False]}, 1, 0]}},
                        # F3: held by a pause (they carry a reason too)
                        "held": {"$sum": {"$cond": [{"$gte": ["$not_before", HELD_OFFSET]},
                                                    1, 0]}}}},
        ])
        out: dict[str, RowSummary] = {}
        for d in await cursor.to_list(None):
            tenant, state = d["_id"].get("t"), d["_id"].get("s")
            if not isinstance(tenant, str):
                continue  # a row with a non-string tenant: the stuck-row sweep parks it
            summary = out.setdefault(tenant, RowSummary(rows={}))
            summary.rows[str(state)] = summary.rows.get(str(state), 0) + int(d["n"])
            if state == PENDING:
                held = int(d.get("held") or 0)
                summary.held += held
                summary.waiting += max(0, int(d.get("waiting") or 0) - held)
            oldest = finite(d.get("oldest"))
            if state in LIVE_STATES and oldest is not None:
                prev = summary.oldest_live_created_at
                summary.oldest_live_created_at = oldest if prev is None else min(prev, oldest)
        return out

    @translated
    async def next_event_at(self, after: Mapping[str, int]) -> dict[str, float]:
        """One ``find_one`` per tenant over the (tenant_id, seq) index, ``CONCURRENT_READS`` at
        a time. (An ``$or`` of one clause per tenant was one query, but a server may scan every
        event for every clause: 3,000 lagging tenants took over a minute on the wire server.)"""
        out: dict[str, float] = {}
        items = list(after.items())

        async def first(tenant: str, cursor: int) -> None:
            doc = await self.events.find_one({"tenant_id": tenant, "seq": {"$gt": cursor}},
                                             {"_id": 0, "at": 1}, sort=[("seq", ASCENDING)])
            at = None if doc is None else finite(doc.get("at"))
            if at is not None:
                out[tenant] = at

        for i in range(0, len(items), CONCURRENT_READS):
            async with anyio.create_task_group() as tg:
                for tenant, cursor in items[i:i + CONCURRENT_READS]:
                    tg.start_soon(first, tenant, cursor)
        return out

    @translated
    async def attention(self, offset: int, limit: int) -> AttentionPage:
        """One pass over the counters and cursors: each cursor joins as its negated seq, so one
        ``$group`` per tenant sums to its lag (counter - cursor); the dead-letters join from
        the failed rows' partial index. Every later stage filters with a query operator first
        (a server may evaluate expressions document by document: on the wire server each
        expression stage over 20,000 documents cost about 0.2 s)."""
        needs_look = {"$or": [{"lag": {"$gt": 0}}, {"f": {"$gt": 0}}]}
        cursor = await self.counters.aggregate([
            {"$match": _NUMBER},  # a counter whose seq is not an integer says nothing (R1)
            {"$unionWith": {"coll": CURSORS, "pipeline": [
                {"$match": _NUMBER}, {"$project": {"seq": {"$subtract": [0, "$seq"]}, "c": "$seq"}}]}},
            {"$unionWith": {"coll": EFFECTS, "pipeline": [
                {"$match": {"state": FAILED}},
                {"$group": {"_id": "$tenant_id", "f": {"$sum": 1}}}]}},
            {"$group": {"_id": "$_id", "lag": {"$sum": "$seq"}, "h": {"$max": "$seq"},
                        "c": {"$max": "$c"}, "f": {"$sum": "$f"}}},
            {"$facet": {
                "page": [{"$match": needs_look}, {"$sort": {"lag": -1, "f": -1, "_id": 1}},
                         {"$skip": offset}, {"$limit": limit}],
                # expressions only over the tenants that need a look (usually few)
                "look": [{"$match": needs_look}, {"$group": {
                    "_id": None, "listed": {"$sum": 1}, "f": {"$sum": "$f"},
                    "behind": {"$sum": {"$cond": [{"$gt": ["$lag", 0]}, 1, 0]}},
                    "e": {"$sum": {"$max": [0, "$lag"]}}}}],
                "total": [{"$count": "n"}],
            }},
        ])
        got = (await cursor.to_list(None)) or [{}]

        def one(name: str, field: str) -> int:
            return _n(((got[0].get(name) or [{}])[0]).get(field))

        page = []
        for d in got[0].get("page") or []:
            tenant, head, cur, failed = d.get("_id"), d.get("h"), d.get("c"), d.get("f")
            head = 0 if isinstance(head, int) and not isinstance(head, bool) and head < 0 else head
            cur = 0 if cur is None else cur
            if isinstance(tenant, str) and is_seq(head) and is_seq(cur):
                page.append(TenantLag(tenant_id=tenant, head=int(head), cursor=int(cur),
                                      dead_letters=int(failed) if is_seq(failed) else 0))
        return AttentionPage(tenants=page, listed=one("look", "listed"),
                             total=one("total", "n"), behind=one("look", "behind"),
                             events_behind=one("look", "e"), dead_letters=one("look", "f"))


def _n(value: object) -> int:
    return value if isinstance(value, int) and is_seq(value) else 0
