"""A card's burst of coalescing rows (``burst_at`` set): the newest row of the burst, the
first that covers it (done, or closed), a new event's deadline carried onto the pending row,
and a restart of the burst's clock."""

from __future__ import annotations

from typing import Any

from anyio.lowlevel import checkpoint

from board_outbox.adapters.memory.outbox.rows import OutboxDocs, _number
from board_outbox.model.row_documents import row_summary
from board_outbox.model.rows import CLAIMED, DONE, LIVE_STATES, PENDING
from board_outbox.ports import RowIdentity


class OutboxBursts(OutboxDocs):
    """``newest_in_burst``, ``covered_in_burst``, ``carry_burst``, ``restart_burst``."""

    def _burst_rows(self, tenant_id: str, sub_id: str, card_id: str,
                    after_seq: int) -> list[tuple[RowIdentity, dict[str, Any]]]:
        out = []
        for d in self._docs.values():
            ev = d.get("event")
            if (d.get("tenant_id") != tenant_id or d.get("sub_id") != sub_id
                    or d.get("burst_at") is None or not isinstance(ev, dict)
                    or ev.get("card_id") != card_id
                    or d.get("state") not in (PENDING, CLAIMED, DONE)):
                continue
            s = row_summary(d)
            if s is not None and s.seq > after_seq:
                out.append((s, d))
        out.sort(key=lambda sd: sd[0].seq)
        return out

    async def newest_in_burst(self, tenant_id: str, sub_id: str, card_id: str,
                              after_seq: int) -> RowIdentity | None:
        await checkpoint()
        rows = self._burst_rows(tenant_id, sub_id, card_id, after_seq)
        return rows[-1][0] if rows else None

    async def covered_in_burst(self, tenant_id: str, sub_id: str, card_id: str,
                              after_seq: int) -> RowIdentity | None:
        await checkpoint()
        return next((s for s, d in self._burst_rows(tenant_id, sub_id, card_id, after_seq)
                     if d.get("burst_closed") is True or s.state == DONE), None)

    async def carry_burst(self, row_key: str, *, burst_at: float, due_by: float, now: float,
                          close: bool = False) -> bool:
        await checkpoint()
        ref = self._by_key.get(row_key)
        doc = None if ref is None else self._docs.get(ref)
        if doc is None or doc.get("state") != PENDING:
            return False
        doc["burst_at"] = min(float(doc.get("burst_at", burst_at)), burst_at)
        doc["not_before"] = min(float(doc.get("not_before", due_by)), due_by)
        doc["updated_at"] = now
        if close:
            doc["burst_closed"] = True
        return True

    async def restart_burst(self, tenant_id: str, sub_id: str, card_id: str, after_seq: int,
                            *, at: float) -> int:
        await checkpoint()
        n = 0
        for d in self._docs.values():
            ev, seq, burst = d.get("event"), d.get("seq"), d.get("burst_at")
            if (d.get("tenant_id") == tenant_id and d.get("sub_id") == sub_id
                    and d.get("state") in LIVE_STATES and _number(burst) and _number(seq)
                    and seq > after_seq and isinstance(ev, dict) and ev.get("card_id") == card_id):
                d["burst_at"] = max(burst, at)
                n += 1
        return n
