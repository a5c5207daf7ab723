"""Counts and ages read for the metrics, the health checks and explain: rows by state, the
tenants with live rows, a tenant's oldest live row, the latency of rows done lately, and the
rows due ahead of one."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from anyio.lowlevel import checkpoint

from board_outbox.adapters.memory.outbox.rows import OutboxDocs, _number
from board_outbox.model.row_documents import done_latency
from board_outbox.model.rows import DONE, LIVE_STATES, PENDING
from board_outbox.model.times import stamp
from board_outbox.model.validation import finite
from board_outbox.ports import DoneLatency


class OutboxGauges(OutboxDocs):
    """``count_by_state``, ``live_tenants``, ``oldest_live_created_at``, ``done_latencies``,
    ``due_ahead``."""

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

    async def done_latencies(self, since: float, limit: int) -> list[DoneLatency]:
        await checkpoint()
        done = [d for d in self._docs.values() if d.get("state") == DONE
                and isinstance(d.get("done_at"), datetime) and d["done_at"].timestamp() >= since]
        done.sort(key=lambda d: d["done_at"], reverse=True)
        return [lat for d in done[:limit] if (lat := done_latency(d)) is not None]

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
