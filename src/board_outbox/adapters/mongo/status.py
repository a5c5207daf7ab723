"""The per-tenant status figures for every tenant at once (O1-O3, ``StatusStore``): one
aggregate over ``trigger_effects`` and one query over ``board_events`` per refresh, whatever
the tenant count (the per-tenant path cost several reads per tenant)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from board_outbox.adapters.mongo.errors import translated
from board_outbox.adapters.mongo.events import EVENTS
from board_outbox.adapters.mongo.outbox import EFFECTS, IN_STATE
from board_outbox.model.domain import LIVE_STATES, PENDING
from board_outbox.model.validation import finite
from board_outbox.ports import RowSummary

# the first event past a cursor is looked for among the next WINDOW seqs (a gap wider than
# that only leaves lag_seconds at 0); at most MAX_BEHIND tenants per query (one BSON document)
WINDOW = 64
MAX_BEHIND = 100_000


class MongoStatusStore:
    def __init__(self, db: Any) -> None:
        self.effects = db[EFFECTS]
        self.events = db[EVENTS]

    @translated
    async def row_summary(self, states: Collection[str] | None = None) -> dict[str, RowSummary]:
        """With ``states``, only the rows in those states, each state's clause served by its
        partial index (``IN_STATE``); without, every row (the history too)."""
        match: list[dict[str, Any]] = []
        if states is not None:
            match = [{"$match": {"$or": [IN_STATE.get(s, {"state": s}) for s in sorted(states)]}}]
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
        if not after:
            return {}
        clauses = [{"tenant_id": t, "seq": {"$gt": c, "$lte": c + WINDOW}}
                   for t, c in list(after.items())[:MAX_BEHIND]]
        cursor = await self.events.aggregate([
            {"$match": {"$or": clauses}},
            {"$project": {"_id": 0, "tenant_id": 1, "seq": 1, "at": 1}},
            {"$sort": {"tenant_id": 1, "seq": 1}},
            {"$group": {"_id": "$tenant_id", "at": {"$first": "$at"}}},
        ])
        out: dict[str, float] = {}
        for d in await cursor.to_list(None):
            at = finite(d.get("at"))
            if at is not None:
                out[str(d["_id"])] = at
        return out
