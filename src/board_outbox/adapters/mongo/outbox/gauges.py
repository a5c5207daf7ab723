"""Counts and ages read for the metrics, the health checks and explain: rows by state, the
tenants with live rows, a tenant's oldest live row, the latency of rows done lately, and the
rows due ahead of one. Read-only, each over the partial index of the state it counts."""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

from pymongo import DESCENDING

from board_outbox.adapters.mongo.errors import translated
from board_outbox.adapters.mongo.outbox.statements import IN_STATE, OutboxCollection
from board_outbox.model.row_documents import ROW_STATES, done_latency
from board_outbox.model.rows import DONE, LIVE_STATES, PENDING
from board_outbox.model.times import TIME_MAX, TIME_MIN
from board_outbox.ports import DoneLatency


class OutboxGauges(OutboxCollection):
    """``count_by_state``, ``live_tenants``, ``oldest_live_created_at``, ``done_latencies``,
    ``due_ahead``."""

    @translated
    async def count_by_state(
        self, tenant_id: str | None = None, *, states: Collection[str] | None = None
    ) -> dict[str, int]:
        """Rows by state. With ``states``, one count per state (each served by that state's
        partial index: its cost is the rows in that state, never the history), except the done
        rows of every tenant, a week of history: the collection's estimated count (metadata on
        mongod) minus the other states' counts. Without ``states``, one aggregate over the
        tenant's rows (its ``tenant_seq`` prefix; every row when no tenant: the demo's check)."""
        if states is not None:
            out: dict[str, int] = {}
            estimate_done = tenant_id is None and DONE in states
            # estimating the done rows takes every other state's count
            counted = (set(ROW_STATES) | set(states)) - {DONE} if estimate_done else set(states)
            for state in sorted(counted):
                q: dict[str, Any] = dict(IN_STATE.get(state, {"state": state}))
                if tenant_id is not None:
                    q["tenant_id"] = tenant_id
                out[state] = int(await self.coll.count_documents(q))
            if estimate_done:
                out[DONE] = max(0, int(await self.coll.estimated_document_count())
                                - sum(out.values()))
            return {s: n for s, n in out.items() if n and s in states}
        pipeline: list[dict[str, Any]] = []
        if tenant_id is not None:
            pipeline.append({"$match": {"tenant_id": tenant_id}})
        pipeline.append({"$group": {"_id": "$state", "n": {"$sum": 1}}})
        cursor = await self.coll.aggregate(pipeline)
        return {str(d["_id"]): int(d["n"]) for d in await cursor.to_list(None)}

    @translated
    async def live_tenants(self) -> set[str]:
        """One ``distinct`` per live state, each over that state's partial index."""
        found: set[str] = set()
        for state in LIVE_STATES:
            found |= {str(t) for t in await self.coll.distinct("tenant_id", IN_STATE[state])
                      if isinstance(t, str)}
        return found

    @translated
    async def oldest_live_created_at(self, tenant_id: str) -> float | None:
        doc = await self.coll.find_one(
            {"tenant_id": tenant_id, "state": {"$in": list(LIVE_STATES)},
             "created_at": {"$gte": TIME_MIN, "$lte": TIME_MAX}},  # R7: a time, in range
            {"created_at": 1}, sort=[("created_at", 1)],
        )
        return None if doc is None else float(doc.get("created_at") or 0.0)

    @translated
    async def done_latencies(self, since: float, limit: int) -> list[DoneLatency]:
        """One query over the partial ``done_ttl`` index (state done, by done_at)."""
        docs = await self.coll.find(
            {"state": "done", "done_at": {"$gte": datetime.fromtimestamp(since, UTC)}},
            {"_id": 0, "tenant_id": 1, "kind": 1, "done_at": 1, "event.at": 1},
        ).sort("done_at", DESCENDING).limit(limit).to_list(None)
        return [lat for d in docs if (lat := done_latency(d)) is not None]

    @translated
    async def due_ahead(self, tenant_id: str, not_before: float, seq: int, limit: int) -> int:
        """One count over the partial ``pending_tenant_not_before`` index (both branches bound
        its key), stopped at ``limit``."""
        return int(await self.coll.count_documents(
            {"state": PENDING, "tenant_id": tenant_id,
             "$or": [{"not_before": {"$lt": not_before}},
                     {"not_before": not_before, "seq": {"$lt": seq}}]},
            limit=limit))
