"""``trigger_series`` on MongoDB: the rolling series the console charts.

``{_id: "<minute>/<replica>", minute, replica, counts: {materialized, done, dead}, base: {...},
lag_total, behind, listed, lag: [{t: tenant, n: events}, ...], expire_at}``. Each replica
writes one document a minute (one upsert: ``$max`` of its cumulative counts, ``$min`` of the
base, ``$set`` of the lag), so a flush repeated after an unclear failure changes nothing. The TTL index on
``expire_at`` (a date, ``schema.py``) keeps the last hours; the window is read over the
``minute`` index in one query, newest documents first up to a limit, and only the lag entries
of the tenants asked for (the overview's page) are parsed. Tenant ids are values in the stored
documents, never keys or paths."""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

from board_outbox.adapters.mongo.errors import translated
from board_outbox.model.series import (
    COUNTERS,
    MAX_READ,
    SERIES_COLLECTION,
    SeriesPoint,
    series_id,
    series_points,
)

SERIES = SERIES_COLLECTION


class MongoSeriesStore:
    def __init__(self, db: Any) -> None:
        self.coll = db[SERIES]

    @translated
    async def flush(self, point: SeriesPoint, expire_at: float) -> None:
        await self.coll.update_one(
            {"_id": series_id(point.minute, point.replica)},
            {"$setOnInsert": {"minute": point.minute, "replica": point.replica},
             "$max": {f"counts.{f}": getattr(point.counts, f) for f in COUNTERS},
             "$min": {f"base.{f}": getattr(point.base, f) for f in COUNTERS},
             "$set": {"lag_total": point.lag_total, "behind": point.behind,
                      "listed": len(point.lag),
                      "lag": [{"t": t, "n": n} for t, n in point.lag],
                      "expire_at": datetime.fromtimestamp(expire_at, UTC)}},
            upsert=True)

    @translated
    async def read(self, since: int, until: int, tenants: Collection[str] | None = None,
                   limit: int = MAX_READ) -> list[SeriesPoint]:
        # whole documents, the lag entries kept here: filtering them in the server is one
        # expression per entry, which costs a wire server that evaluates in Python ~1 s per
        # 6,000 entries (a projection costs more than the bytes it saves, too)
        docs = await self.coll.find({"minute": {"$gte": since, "$lt": until}}) \
            .sort("minute", -1).limit(limit).to_list(None)
        return sorted(series_points(docs, None if tenants is None else set(tenants)),
                      key=lambda p: (p.minute, p.replica))
