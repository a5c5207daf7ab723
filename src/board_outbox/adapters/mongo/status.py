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
from board_outbox.adapters.mongo.outbox import EFFECTS
from board_outbox.model.domain import FAILED, LIVE_STATES, PENDING
from board_outbox.model.records import AttentionPage, TenantLag
from board_outbox.model.validation import finite, is_seq
from board_outbox.ports import RowSummary

# first events past a cursor read at once (each one indexed read on tenant_id, seq)
CONCURRENT_READS = 8
# a true integer seq (a string, a double or a Decimal128 counts as absent here)
_INT = {"$or": [{"seq": {"$type": "int"}}, {"seq": {"$type": "long"}}]}


class MongoStatusStore:
    def __init__(self, db: Any) -> None:
        self.effects = db[EFFECTS]
        self.events = db[EVENTS]
        self.counters = db[COUNTERS]

    @translated
    async def row_summary(self, tenants: Collection[str] | None = None
                          ) -> dict[str, RowSummary]:
        match = [] if tenants is None else [{"$match": {"tenant_id": {"$in": list(tenants)}}}]
        cursor = await self.effects.aggregate([
            *match,
            {"$group": {"_id": {"t": "$tenant_id", "s": "$state"}, "n": {"$sum": 1},
                        "oldest": {"$min": "$created_at"},
                        # F2: rows that carry a reason they wait on a limit
                        "waiting": {"$sum": {"$cond": [{"$ifNull": ["$waiting", False]}, 1, 0]}}}},
        ])
        out: dict[str, RowSummary] = {}
        for d in await cursor.to_list(None):
            tenant, state = d["_id"].get("t"), d["_id"].get("s")
            if not isinstance(tenant, str):
                continue  # a row with a non-string tenant: the stuck-row sweep parks it
            summary = out.setdefault(tenant, RowSummary(rows={}))
            summary.rows[str(state)] = summary.rows.get(str(state), 0) + int(d["n"])
            if state == PENDING:
                summary.waiting += int(d.get("waiting") or 0)
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
        needs_look = {"$or": [{"lag": {"$gt": 0}}, {"f": {"$gt": 0}}]}
        cursor = await self.counters.aggregate([
            {"$match": _INT},
            {"$project": {"h": "$seq"}},
            {"$unionWith": {"coll": CURSORS, "pipeline": [{"$match": _INT},
                                                          {"$project": {"c": "$seq"}}]}},
            {"$unionWith": {"coll": EFFECTS, "pipeline": [
                {"$match": {"state": FAILED}},
                {"$group": {"_id": "$tenant_id", "f": {"$sum": 1}}}]}},
            {"$group": {"_id": "$_id", "h": {"$max": "$h"}, "c": {"$max": "$c"},
                        "f": {"$sum": "$f"}}},
            {"$project": {"h": {"$ifNull": ["$h", 0]}, "c": {"$ifNull": ["$c", 0]}, "f": 1,
                          "lag": {"$max": [0, {"$subtract": [{"$ifNull": ["$h", 0]},
                                                             {"$ifNull": ["$c", 0]}]}]}}},
            {"$facet": {
                "page": [{"$match": needs_look}, {"$sort": {"lag": -1, "f": -1, "_id": 1}},
                         {"$skip": offset}, {"$limit": limit}],
                "totals": [{"$group": {
                    "_id": None, "total": {"$sum": 1}, "events": {"$sum": "$lag"},
                    "failed": {"$sum": "$f"},
                    "behind": {"$sum": {"$cond": [{"$gt": ["$lag", 0]}, 1, 0]}},
                    "listed": {"$sum": {"$cond": [{"$or": [{"$gt": ["$lag", 0]},
                                                           {"$gt": ["$f", 0]}]}, 1, 0]}}}}],
            }},
        ])
        got = (await cursor.to_list(None)) or [{}]
        totals = (got[0].get("totals") or [{}])[0]
        page = []
        for d in got[0].get("page") or []:
            tenant, head, cur, failed = d.get("_id"), d.get("h"), d.get("c"), d.get("f")
            if isinstance(tenant, str) and is_seq(head) and is_seq(cur):
                page.append(TenantLag(tenant_id=tenant, head=int(head), cursor=int(cur),
                                      dead_letters=int(failed) if is_seq(failed) else 0))
        return AttentionPage(tenants=page, listed=_n(totals.get("listed")),
                             total=_n(totals.get("total")), behind=_n(totals.get("behind")),
                             events_behind=_n(totals.get("events")),
                             dead_letters=_n(totals.get("failed")))


def _n(value: object) -> int:
    return value if isinstance(value, int) and is_seq(value) else 0
