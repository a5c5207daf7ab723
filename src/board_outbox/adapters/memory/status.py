"""The in-memory ``StatusStore``: the twins' documents, walked once per refresh."""

from __future__ import annotations

import bisect
from collections.abc import Collection, Mapping

from anyio.lowlevel import checkpoint

from board_outbox.adapters.memory.events import MemoryEventLog
from board_outbox.adapters.memory.outbox import MemoryEffectOutbox
from board_outbox.model.domain import LIVE_STATES, PENDING
from board_outbox.model.validation import finite
from board_outbox.ports import RowSummary


class MemoryStatusStore:
    def __init__(self, events: MemoryEventLog, outbox: MemoryEffectOutbox) -> None:
        self.events, self.outbox = events, outbox

    async def row_summary(self, states: Collection[str] | None = None) -> dict[str, RowSummary]:
        await checkpoint()
        out: dict[str, RowSummary] = {}
        for doc in self.outbox.all_docs():
            tenant, state = doc.get("tenant_id"), str(doc.get("state"))
            if not isinstance(tenant, str) or (states is not None and state not in states):
                continue
            summary = out.setdefault(tenant, RowSummary(rows={}))
            summary.rows[state] = summary.rows.get(state, 0) + 1
            if state == PENDING and doc.get("waiting"):
                summary.waiting += 1  # F2: deferred over a limit
            created = finite(doc.get("created_at"))
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
