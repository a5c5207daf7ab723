"""The in-memory ``SeriesStore``: ``trigger_series`` documents in a dict, shaped as the Mongo
adapter stores them (so a test can plant a malformed one: ``put_raw``) and merged by the same
rules (larger counts, smaller base). Expired documents are dropped at each flush (the TTL)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from anyio.lowlevel import checkpoint

from board_outbox.adapters.memory.documents import RawDocuments
from board_outbox.model.errors import StoreError
from board_outbox.model.series import (
    COUNTERS,
    MAX_READ,
    SeriesPoint,
    series_id,
    series_points,
)


class MemorySeriesStore(RawDocuments):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0  # flushes, for tests that count them

    def put_raw(self, doc_id: str, doc: dict[str, Any]) -> None:
        self._docs[doc_id] = {"_id": doc_id, **doc}

    async def flush(self, point: SeriesPoint, expire_at: float) -> None:
        await checkpoint()
        self.writes += 1
        self._docs = {k: d for k, d in self._docs.items()
                      if not isinstance(d.get("expire_at"), (int, float))
                      or d["expire_at"] > point.minute}
        key = series_id(point.minute, point.replica)
        doc = self._docs.setdefault(key, {"_id": key, "minute": point.minute,
                                          "replica": point.replica, "counts": {}, "base": {}})
        counts, base = doc.setdefault("counts", {}), doc.setdefault("base", {})
        if not isinstance(counts, dict) or not isinstance(base, dict):  # as the server refuses
            raise StoreError(f"series document {key}: counts or base is not a document")
        new, low = point.counts.as_dict(), point.base.as_dict()
        for f in COUNTERS:
            counts[f] = max(counts.get(f, new[f]), new[f])
            base[f] = min(base.get(f, low[f]), low[f])
        doc.update(lag_total=point.lag_total, behind=point.behind, listed=len(point.lag),
                   lag=[{"t": t, "n": n} for t, n in point.lag], expire_at=expire_at)

    async def read(self, since: int, until: int, tenants: Collection[str] | None = None,
                   limit: int = MAX_READ) -> list[SeriesPoint]:
        await checkpoint()
        docs = [d for d in self._docs.values()
                if isinstance(d.get("minute"), (int, float)) and since <= d["minute"] < until]
        docs = sorted(docs, key=lambda d: d["minute"], reverse=True)[:limit]
        return sorted(series_points(docs, None if tenants is None else set(tenants)),
                      key=lambda p: (p.minute, p.replica))
