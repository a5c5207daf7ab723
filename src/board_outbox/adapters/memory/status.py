"""The in-memory ``StatusStore``: the twins' documents, walked once per refresh."""

from __future__ import annotations

import bisect
from collections.abc import Collection, Mapping

from anyio.lowlevel import checkpoint

from board_outbox.adapters.memory.cursors import MemoryCursorStore
from board_outbox.adapters.memory.events import MemoryEventLog
from board_outbox.adapters.memory.outbox import MemoryEffectOutbox
from board_outbox.model.pause import is_held
from board_outbox.model.records import AttentionPage, TenantLag
from board_outbox.model.rows import FAILED, LIVE_STATES, PENDING
from board_outbox.model.times import stamp
from board_outbox.model.validation import finite
from board_outbox.ports import RowSummary


class MemoryStatusStore:
    def __init__(self, events: MemoryEventLog, outbox: MemoryEffectOutbox,
                 cursors: MemoryCursorStore | None = None) -> None:
        self.events, self.outbox = events, outbox
        self.cursors = cursors if cursors is not None else MemoryCursorStore()

    async def row_summary(self, tenants: Collection[str] | None = None,
                          states: Collection[str] | None = None) -> dict[str, RowSummary]:
        await checkpoint()
        only = None if tenants is None else set(tenants)
        out: dict[str, RowSummary] = {}
        for doc in self.outbox.all_docs():
            tenant, state = doc.get("tenant_id"), str(doc.get("state"))
            if not isinstance(tenant, str) or (only is not None and tenant not in only) or (
                    states is not None and state not in states):
                continue
            summary = out.setdefault(tenant, RowSummary(rows={}))
            summary.rows[state] = summary.rows.get(state, 0) + 1
            if state == PENDING and is_held(doc.get("not_before")):
                summary.held += 1  # F3: held by a pause
            elif state == PENDING and doc.get("waiting"):
                summary.waiting += 1  # F2: deferred over a limit
            created = stamp(doc.get("created_at"))  # R7: a time in range, or none
            if state in LIVE_STATES and created is not None:
                prev = summary.oldest_live_created_at
                summary.oldest_live_created_at = created if prev is None else min(prev, created)
        return out

    async def next_event_at(self, after: Mapping[str, int]) -> dict[str, float]:
        await checkpoint()
        out: dict[str, float] = {}
        for tenant, cursor in after.items():
            seqs = self.events._seqs.get(tenant, [])
            i = bisect.bisect_right(seqs, cursor)
            if i < len(seqs):
                at = finite(self.events._docs[tenant][seqs[i]].get("at"))
                if at is not None:
                    out[tenant] = at
        return out

    async def attention(self, offset: int, limit: int) -> AttentionPage:
        heads = await self.events.heads()
        cursors = await self.cursors.all()
        failed: dict[str, int] = {}
        for doc in self.outbox.all_docs():
            tenant = doc.get("tenant_id")
            if doc.get("state") == FAILED and isinstance(tenant, str):
                failed[tenant] = failed.get(tenant, 0) + 1
        every = [TenantLag(tenant_id=t, head=heads.get(t, 0), cursor=cursors.get(t, 0),
                           dead_letters=failed.get(t, 0))
                 for t in set(heads) | set(cursors) | set(failed)]
        look = sorted((t for t in every if t.lag > 0 or t.dead_letters > 0),
                      key=lambda t: (-t.lag, -t.dead_letters, t.tenant_id))
        return AttentionPage(tenants=look[offset:offset + limit], listed=len(look),
                             total=len(every), behind=sum(1 for t in every if t.lag > 0),
                             events_behind=sum(t.lag for t in every),
                             dead_letters=sum(failed.values()))
