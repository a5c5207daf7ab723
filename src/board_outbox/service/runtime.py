"""The service runtime: one process runs the change-stream waker, the drain loop and the effect
worker under one anyio task group. N processes cooperate with no leader (C4): the cursor CAS and
the leased claims are the only coordination.

This module wires a ``Service`` (the registry, the tail, the worker and what joins them) and
starts and stops it; its halves hold the loops: ``HotLoops`` (``service/hotloops.py``: the tail
and worker loops), ``StreamWaker`` (``service/waker.py``) and ``Upkeep`` (``service/upkeep.py``:
the background loops)."""

from __future__ import annotations

import dataclasses
import gc
import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from opentelemetry import trace

from board_outbox.engine.flow.limits import LaunchGate, LimitSettings
from board_outbox.engine.flow.membership import Ownership, new_member_id
from board_outbox.engine.flow.pause import PauseGate
from board_outbox.engine.flow.pressure import Pressure
from board_outbox.engine.handlers import LaunchHandler
from board_outbox.engine.handlers.contract import Projection
from board_outbox.engine.handlers.registry import HandlerRegistry
from board_outbox.engine.tail.prefetch import StreamEvents
from board_outbox.engine.tail.subcache import SubscriptionCache
from board_outbox.engine.tail.tail import Tail
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.engine.upkeep.audit import Auditor, BackgroundAudit
from board_outbox.engine.upkeep.generations import versioned
from board_outbox.engine.upkeep.series import SeriesRecorder
from board_outbox.engine.work.worker import EffectWorker
from board_outbox.model.clock import Clock, RandomSource, SystemClock, seeded_random
from board_outbox.model.domain import EffectRow
from board_outbox.model.errors import ConfigError
from board_outbox.model.validation import OnceLog
from board_outbox.ports import Stores
from board_outbox.service.config_sections import Config
from board_outbox.service.health import (
    NextEvents,
    StallDetector,
    TenantStatus,
)
from board_outbox.service.hotloops import HotLoops
from board_outbox.service.plugins import build_handlers, register_projections
from board_outbox.service.resume import ResumePoint
from board_outbox.service.stats import Stats
from board_outbox.service.upkeep import Upkeep
from board_outbox.service.waker import StreamWaker

log = logging.getLogger("board_outbox.service")

# the counters live in service/stats.py (the waker counts too)


def build_registry(
    stores: Stores, projections: list[str], handlers: Mapping[str, str] | None = None,
    limits: LimitSettings | None = None, pause: PauseGate | None = None,
) -> HandlerRegistry:
    """The built-in handlers, the named projections and the user effect kinds (``[handlers]``
    and the ``board_outbox.handlers`` entry points; see ``plugins``). Launches keep to
    ``limits`` and to their subscriptions' own limits (F2) on a backend with a limit store, and
    are held while their bot is paused in ``pause`` (F3)."""
    registry = HandlerRegistry()
    if limits is not None and limits.configured and stores.limits is None:
        raise ConfigError("limits: this backend keeps no limit store")
    gate = None if stores.limits is None else LaunchGate(stores.limits, limits or LimitSettings())
    registry.register("launch", LaunchHandler(stores.subs, stores.cards, stores.labels,
                                              stores.launcher, gate, pause))
    register_projections(registry, stores.readmodels, projections)
    for kind, handler in build_handlers(handlers or {}, stores).items():
        registry.register(kind, handler)
    return registry


class Service(HotLoops, StreamWaker, Upkeep):
    def __init__(
        self,
        stores: Stores,
        config: Config,
        *,
        clock: Clock | None = None,
        rng: RandomSource | None = None,
        registry: HandlerRegistry | None = None,
        on_done: Callable[[EffectRow, str], None] | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        member_id: str = "",
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        # projection rows write the building generation too while a shadow rebuild runs (B3)
        self.stores = stores = versioned(stores, self.clock, config.store.generation_cache_seconds)
        # F3: the pauses, read once per membership heartbeat (the pause loop); the worker
        # holds a paused tenant's or subscription's rows, the launch handler a paused bot's
        self.pauses = None if stores.pauses is None else PauseGate(
            stores.pauses, stores.outbox, self.clock, every=config.membership.interval_seconds)
        # the subscriptions, served from memory while the change stream, which carries their
        # writes too (S6), is open (M10b)
        self.subscriptions: SubscriptionCache | None = None
        if stores.feed is not None and config.tail.change_streams:
            self.subscriptions = SubscriptionCache(stores.subs)
            self.stores = stores = dataclasses.replace(stores, subs=self.subscriptions)
        self.registry = registry or build_registry(stores, config.projections, config.handlers,
                                                   config.limits, self.pauses)
        self.tail = Tail(
            events=stores.events,
            cursors=stores.cursors,
            outbox=stores.outbox,
            subs=stores.subs,
            cards=stores.cards,
            clock=self.clock,
            settings=config.tail,
            projections=self.registry.projections,
            kinds=self.registry.kinds,
            tracer_provider=tracer_provider,
        )
        self.worker = EffectWorker(
            outbox=stores.outbox,
            registry=self.registry,
            clock=self.clock,
            settings=config.worker,
            rng=rng or seeded_random(),
            on_done=on_done,
            tracer_provider=tracer_provider,
        )
        self.stats = Stats()
        self.metrics = Metrics()
        self.worker.metrics = self.metrics
        self.worker.pause = self.pauses
        # the tail's rows go to this replica's worker born claimed, as far as it has room (T1)
        self.tail.handoff = self.worker
        self.worker.on_receive = self._received
        self.worker.stream_open = lambda: self.stream_open  # the idle pick is then the net
        self.worker.on_room = self._lanes_moved
        self._awaiting_room: set[str] = set()  # tenants the worker had no room for yet
        # backpressure (T1): one factor for the tail, the worker and the loops' pauses
        self.pressure = Pressure(self.clock, slow_seconds=config.service.slow_store_seconds)
        self.tail.pressure = self.worker.pressure = self.pressure
        # the change stream's event documents: a batch they cover is not read again (a round trip saved)
        if stores.feed is not None:
            self.tail.streamed = StreamEvents()
        self._gauge_refreshes = 0
        # S1: which tenants this replica drains; its worker prefers their rows
        self.ownership = Ownership(stores.members, self.clock, settings=config.membership,
                                   member_id=member_id or new_member_id(config.service.replica_name))
        self.worker.prefer = self.ownership.prefer
        # the console's charts: one series document a minute (engine/upkeep/series.py)
        self.series: SeriesRecorder | None = None
        if stores.series is not None and config.series.enabled:
            self.series = SeriesRecorder(stores.series, self.clock, self.ownership.member_id,
                                         config.series, counts=self.series_counts,
                                         lag=self.owned_lag)
        # S5: the tenants the change stream should leave out (owned by the other members); the
        # waker reopens its stream when this differs from what the open stream was given
        self.stream_exclude: frozenset[str] = frozenset()
        self.stream_excluding: frozenset[str] = frozenset()  # what the open stream leaves out
        self._dirty: set[str] = set()
        self._full_poll = False
        # tenants whose last drain stopped short (a store error, a young gap, poison...), each
        # drained again once tail.poll_interval_seconds have passed, and when a failed poll net
        # is tried again: while the stream is open the poll net is stretched (S6), its retries
        # are not
        self._retry: dict[str, float] = {}
        self._poll_retry: float | None = None
        # S6: the drain passes begun, and whether one runs: the stream is read at their pace
        # while the tail is busy (``pace_stream``)
        self._passes = 0
        self._draining = False
        self._tail_moved = anyio.Event()
        self._read_at_pass = 0
        self._tail_wake = anyio.Event()
        self._worker_wake = anyio.Event()
        self._stopping = anyio.Event()
        self._worker_exited = anyio.Event()
        # what /healthz and /readyz look at (O1, O2)
        self.loops: dict[str, bool] = {}
        self.stream_open = False
        # since when (clock time) the change stream has been closed, and why: the service runs
        # on the poll net alone meanwhile (None: open, or change streams are off)
        self.stream_down_since: float | None = None
        self.stream_down_reason = "not opened yet"
        self._once = OnceLog(log)
        # S4: the stream's resume token, saved at most every token_save_seconds and on the way out
        self.resume = ResumePoint(stores.tokens, config.tail.token_save_seconds, anyio.current_time)
        self.last_poll_ok: float | None = None  # clock time of the last drain pass that read the store
        self.stalls = StallDetector(config.tail.stall_seconds)
        self.status: dict[str, TenantStatus] = {}
        # per-tenant status (a constant number of queries per refresh, but each reads every
        # tenant's figures): only while the operator endpoints serve it (the ops server turns
        # it on)
        self.status_enabled = False
        # the first event past each lagging cursor, read at most MAX_NEXT_EVENT_READS a refresh
        self.next_events = NextEvents()
        self.history_headroom: float | None = None  # seconds (A2), refreshed with the status
        # A1: the bounded, incremental completeness audit of the tenants this replica owns
        self.audit = BackgroundAudit(
            Auditor(self.tail, retention_seconds=config.retention.horizon()), config.audit)

    # --- control ---------------------------------------------------------------------------

    def add_projection(self, projection: Projection) -> None:
        """Run one more projection, given as an object (embedding code and the simulation; the
        configured ``projections`` are entry-point names): rows owed from the next batch on."""
        self.registry.register_projection(projection)
        self.tail.projections = tuple(self.registry.projections)
        if self.tail.kinds is not None:
            self.tail.kinds = frozenset(self.registry.kinds)

    def stop(self) -> None:
        """Begin a graceful shutdown: stop claiming; in-flight rows finish or are released."""
        self.worker.stopping = True
        self._stopping.set()
        self._tail_wake.set()
        self._worker_wake.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def preflight(self) -> None:
        """Reach the store once before the loops start: a store we cannot reach or may not use
        at start-up ends the process (one line, exit 1); once running, the loops ride out every
        store error and keep going (R1)."""
        # the tenants known at start (with subscriptions, live rows or events): the first
        # stream already leaves out those another member owns (S5), rather than waking every
        # replica for each until the first poll has seen it
        self.tail.seen = frozenset(await self.tail.tenants())
        # the epoch before the first drain: a tenant born from now on is read from its first
        # event, whenever this or another replica first sees it
        await self.tail.begin()
        if self.pauses is not None:  # no row runs before the pauses are known (F3)
            await self.pauses.refresh(strict=True)

    async def run(self) -> None:
        await self.preflight()
        await self.ownership.beat()  # know the other members before the first poll
        self._rescope_stream()  # and scope the first stream by them
        # Everything built so far lives as long as the process: keep it out of the cyclic GC's
        # full collections, which otherwise re-walk it under load (measured in benchmarks/).
        gc.collect()
        gc.freeze()
        grace = self.config.service.shutdown_grace_seconds
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._alive, "tail", self._tail_loop)
            tg.start_soon(self._alive, "worker", self._worker_loop)
            # a blocked event loop is measured and pinned on the plugin step running then
            tg.start_soon(self._alive, "watchdog", self.worker.watch.monitor)
            if self.stores.feed is not None and self.config.tail.change_streams:
                self.stream_down_since = self.clock.now()
                tg.start_soon(self._alive, "waker", self._waker_loop)
            tg.start_soon(self._alive, "metrics", self._metrics_loop)
            if self.ownership.active:
                tg.start_soon(self._alive, "membership", self._membership_loop)
            if self.config.audit.enabled:
                tg.start_soon(self._alive, "audit", self._audit_loop)
            if self.pauses is not None and not self.ownership.active:
                # with a membership, the pauses ride its heartbeat (S6)
                tg.start_soon(self._alive, "pauses", self._pause_loop)
            if self.series is not None:
                tg.start_soon(self._alive, "series", self._series_loop)
            if self.stores.limits is not None:
                tg.start_soon(self._alive, "limits", self._limits_loop)
            await self._stopping.wait()
            # Past the grace period, cancel: the worker releases its claims while cancelled.
            with anyio.move_on_after(grace):
                await self._worker_exited.wait()
            tg.cancel_scope.cancel()
        if self.series is not None:  # what this minute counted so far, written once
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                await self.series.flush_final()
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            await self.ownership.leave()  # our tenants move now, not after our lease
        log.info("service stopped")

    # --- loops -----------------------------------------------------------------------------

    async def _alive(self, name: str, loop: Callable[[], Any]) -> None:
        self.loops[name] = True
        try:
            await loop()
        finally:
            self.loops[name] = False
