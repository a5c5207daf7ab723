"""The rolling series behind the console's charts: written by each replica
once a minute (``SeriesRecorder``), read for a window and merged across replicas
(``read_window``, ``merge``).

Writing. A replica never writes per event: the service already counts what it materialized,
marked done and dead-lettered (``service/stats.Stats``, cumulative since it started), and keeps
every tenant's lag from its metrics refresh (which reads every counter and cursor anyway). Once
a minute has ended, ``flush_due`` writes one document keyed (that minute, this replica): the
cumulative counts, ``base`` (the counts at the last flush the store acknowledged) and the lag of
the tenants this replica owns that are behind -- the ``max_tenants`` most behind, with the total
over all of them. A flush that fails is not retried within the minute: the next minute's
document carries the counts (its ``base`` is still the last acknowledged one), so nothing is lost,
and since documents hold absolute counts a flush that landed although the replica was told it
failed is not counted twice (``merge``). On shutdown ``flush_final`` writes once more, into the
current minute.

Reading. One query for the window (``SeriesStore.read``); each replica's documents are turned
into per-minute figures (``counts - max(base, the previous document's counts)``), then summed
across replicas; a tenant's lag is the largest any replica reported for it that minute.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Annotated

import msgspec

from board_outbox.model.bad_documents import cap
from board_outbox.model.clock import Clock
from board_outbox.model.errors import StoreError, StoreUnavailable
from board_outbox.model.series import (
    COUNTERS,
    MAX_LAG_ENTRIES,
    MINUTE,
    SeriesCounts,
    SeriesPoint,
    minute_of,
    top_lag,
)
from board_outbox.ports import SeriesStore

log = logging.getLogger("board_outbox.series")

__all__ = ["MinuteFigures", "SeriesRecorder", "SeriesSettings", "SeriesWindow", "merge",
           "most_behind", "read_window"]

# how many hours a replica keeps its documents (their TTL), from a few minutes to two days
KeepHours = Annotated[float, msgspec.Meta(ge=0.05, le=48)]
MaxTenants = Annotated[int, msgspec.Meta(ge=1, le=MAX_LAG_ENTRIES)]


class SeriesSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The rolling series (the ``[series]`` configuration section)."""

    enabled: bool = True
    keep_hours: KeepHours = 6.0  # each document's TTL: the charts reach this far back
    max_tenants: MaxTenants = 1000  # tenants' lag one document lists at most (most behind)


class SeriesRecorder:
    """One replica's writer: at most one document write a minute (plus one on shutdown)."""

    def __init__(self, store: SeriesStore, clock: Clock, replica: str, settings: SeriesSettings,
                 *, counts: Callable[[], SeriesCounts],
                 lag: Callable[[], Mapping[str, int]]) -> None:
        self.store = store
        self.clock = clock
        self.replica = replica
        self.settings = settings
        self.counts = counts  # cumulative since this replica started
        self.lag = lag  # events behind, per tenant this replica owns
        self.acked = SeriesCounts()  # the counts at the last flush the store acknowledged
        self.minute = minute_of(clock.now())  # the minute being counted
        self.writes = 0  # flushes the store acknowledged
        self.failures = 0
        self._failing = False

    def due(self, now: float) -> bool:
        """A minute has ended since the last flush (or since the start)."""
        return minute_of(now) > self.minute

    async def flush_due(self) -> bool:
        """Flush once the minute being counted has ended; True when a document was written.
        The figures go to the minute that just ended (after a stall of several minutes, to the
        last of them: the charts show them there)."""
        now = self.clock.now()
        if not self.due(now):
            return False
        self.minute = minute_of(now)
        return await self._flush(self.minute - MINUTE)

    async def flush_final(self) -> bool:
        """The shutdown flush: what was counted since the last one, into the current minute."""
        return await self._flush(minute_of(self.clock.now()))

    def point(self, minute: int) -> SeriesPoint:
        lag = {t: n for t, n in self.lag().items() if n > 0}
        listed = top_lag(lag, self.settings.max_tenants)
        return SeriesPoint(minute=minute, replica=self.replica, counts=self.counts(),
                           base=self.acked, lag_total=sum(lag.values()), behind=len(lag),
                           lag=listed, listed=len(listed))

    async def _flush(self, minute: int) -> bool:
        point = self.point(minute)
        expire_at = minute + MINUTE + self.settings.keep_hours * 3600
        try:
            await self.store.flush(point, expire_at)
        except (StoreUnavailable, StoreError) as exc:
            self.failures += 1
            if not self._failing:  # one line an outage, not one a minute
                log.warning("series flush of minute %d failed (its counts go with the next "
                            "minute's): %s", minute, cap(exc, 500))
            self._failing = True
            return False
        if self._failing:
            log.info("series flushes work again")
        self._failing = False
        self.acked = point.counts
        self.writes += 1
        return True


class MinuteFigures(msgspec.Struct, kw_only=True):
    """One minute, every replica's documents merged."""

    minute: int
    counts: SeriesCounts  # this minute's own (not cumulative)
    lag_total: int = 0  # events behind, summed over the replicas (each its own tenants)
    behind: int = 0  # tenants behind
    replicas: int = 0  # documents (replicas) that spoke for the minute
    lag: dict[str, int] = msgspec.field(default_factory=dict)  # tenant -> events, as read
    capped: bool = False  # a replica had more tenants behind than it listed

    def tenant_lag(self, tenant_id: str) -> int | None:
        """The tenant's lag this minute; None when unknown (not listed, and a list was cut)."""
        got = self.lag.get(tenant_id)
        return got if got is not None else (None if self.capped else 0)


def _own(point: SeriesPoint, previous: SeriesCounts | None) -> SeriesCounts:
    """This document's own counts: what it counted past ``base`` and past the replica's previous
    document (which may already hold part of it, when a flush landed but was reported failed).
    Counts below the previous document's are a restart under the same replica id: from base."""
    floor: dict[str, int] = {}
    for f in COUNTERS:
        now, base = getattr(point.counts, f), getattr(point.base, f)
        before = None if previous is None else getattr(previous, f)
        floor[f] = max(base, before) if before is not None and now >= before else base
    return point.counts.minus(SeriesCounts(**floor))


def merge(points: Iterable[SeriesPoint]) -> dict[int, MinuteFigures]:
    """Per-minute figures from every replica's documents (any order)."""
    by_replica: dict[str, list[SeriesPoint]] = {}
    for p in points:
        by_replica.setdefault(p.replica, []).append(p)
    out: dict[int, MinuteFigures] = {}
    for docs in by_replica.values():
        previous: SeriesCounts | None = None
        for p in sorted(docs, key=lambda p: p.minute):
            fig = out.get(p.minute)
            if fig is None:
                fig = out[p.minute] = MinuteFigures(minute=p.minute, counts=SeriesCounts())
            fig.counts = fig.counts.plus(_own(p, previous))
            previous = p.counts
            fig.lag_total += p.lag_total
            fig.behind += p.behind
            fig.replicas += 1
            fig.capped = fig.capped or p.capped
            for t, n in p.lag:
                if n > fig.lag.get(t, -1):
                    fig.lag[t] = n
    return dict(sorted(out.items()))


class SeriesWindow(msgspec.Struct, kw_only=True):
    """Every minute of a window (oldest first) and the figures of those the store has."""

    minutes: list[int]
    figures: dict[int, MinuteFigures]

    @property
    def empty(self) -> bool:
        return not self.figures

    def counts(self, field: str) -> list[int]:
        """One counter per minute; a minute no replica wrote counts 0 (its counts, if any, are
        in a later minute)."""
        return [getattr(self.figures[m].counts, field) if m in self.figures else 0
                for m in self.minutes]

    def lag_total(self) -> list[int | None]:
        """Events behind per minute; None: no replica wrote that minute."""
        return [self.figures[m].lag_total if m in self.figures else None for m in self.minutes]

    def tenant_lag(self, tenant_id: str) -> list[int | None]:
        return [self.figures[m].tenant_lag(tenant_id) if m in self.figures else None
                for m in self.minutes]


def window_minutes(now: float, minutes: int) -> list[int]:
    """The ``minutes`` minutes that have ended by ``now``, oldest first."""
    last = minute_of(now) - MINUTE
    return [last - i * MINUTE for i in range(minutes - 1, -1, -1)]


async def read_window(store: SeriesStore, now: float, minutes: int,
                      tenants: Collection[str] | None = ()) -> SeriesWindow:
    """The last ``minutes`` minutes, in one query; each minute's lag lists ``tenants`` only
    (None: every listed tenant; empty: none -- the counts and totals only)."""
    span = window_minutes(now, max(1, minutes))
    points = await store.read(span[0], span[-1] + MINUTE, tenants)
    return SeriesWindow(minutes=span, figures=merge(points))


async def most_behind(store: SeriesStore, now: float, limit: int) -> list[str]:
    """The ``limit`` tenants most behind in the newest of the last few minutes the store has
    (one small query: a few documents per replica)."""
    window = await read_window(store, now, 3, None)
    if window.empty:
        return []
    newest = window.figures[max(window.figures)]
    return [t for t, _n in top_lag(newest.lag, limit)]
