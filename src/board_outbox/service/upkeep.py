"""The service's background loops beside the tail and the worker: the gauges and per-tenant
status (the metrics refresh), the membership heartbeat, the pauses, the completeness audit, the
rolling series and the limits' indexes. A part of ``Service`` (``service/runtime.py``), kept
apart from its hot loops; each loop outlives its dependency failing (R1)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio

from board_outbox.engine.tail.drain import Figures
from board_outbox.model.domain import CANCELLED, CLAIMED, COALESCED, DONE, FAILED, PENDING
from board_outbox.model.series import SeriesCounts
from board_outbox.model.validation import is_seq
from board_outbox.service.health import TenantStatus, history_headroom, tenant_statuses
from board_outbox.service.waker import failure_key

if TYPE_CHECKING:
    from board_outbox.engine.flow.membership import Ownership
    from board_outbox.engine.flow.pause import PauseGate
    from board_outbox.engine.tail.tail import Tail
    from board_outbox.engine.telemetry.metrics import Metrics
    from board_outbox.engine.upkeep.audit import BackgroundAudit
    from board_outbox.engine.upkeep.series import SeriesRecorder
    from board_outbox.model.clock import Clock
    from board_outbox.model.pause import Pause
    from board_outbox.model.validation import OnceLog
    from board_outbox.ports import Stores
    from board_outbox.service.config_sections import Config
    from board_outbox.service.health import NextEvents, StallDetector
    from board_outbox.service.stats import Stats

log = logging.getLogger("board_outbox.service")

DONE_COUNT_EVERY = 6  # the done-rows gauge is refreshed every 6th metrics refresh
SERIES_CHECK_SECONDS = 1.0  # the series loop looks this often whether a minute has ended


class Upkeep:
    """The background half of ``Service``: the attributes below are the service's own."""

    config: Config
    clock: Clock
    stores: Stores
    tail: Tail
    metrics: Metrics
    stats: Stats
    ownership: Ownership
    pauses: PauseGate | None
    series: SeriesRecorder | None
    audit: BackgroundAudit
    status_enabled: bool
    status: dict[str, TenantStatus]
    history_headroom: float | None
    next_events: NextEvents
    stalls: StallDetector
    _gauge_refreshes: int
    _worker_wake: anyio.Event
    _once: OnceLog

    @property
    def stopping(self) -> bool:
        raise NotImplementedError

    @property
    def poll_interval(self) -> float:
        raise NotImplementedError

    def request_full_poll(self) -> None:
        raise NotImplementedError

    def _rescope_stream(self) -> None:
        raise NotImplementedError

    async def refresh_gauges(self) -> None:
        """The gauges (S6). Every replica: the lag of the tenants it owns, from what its poll net
        read (no read of its own while that is fresh). The keeper alone (``Ownership.keeps``):
        the rows by state, and, while the operator endpoints serve them, every tenant's status
        and the history headroom. Another replica's status holds its own tenants, from the same
        figures: their lag and stalls, for its probes and ``/metrics``."""
        figures = await self._figures()
        owns = self.ownership.owns
        self.metrics.lag = {t: figures.lag(t) for t in figures.heads if owns(t)}
        keeper = self.ownership.keeps()
        seldom = self._gauge_refreshes % DONE_COUNT_EVERY == 0
        self._gauge_refreshes += 1
        if not keeper:
            self.metrics.rows = {}  # the keeper's to report
            self.history_headroom = None
            if self.status_enabled:
                self.own_status(figures)
            return
        # the live states and the dead-letters every refresh (each count over its state's
        # partial index; summed from every tenant's status when that is read anyway); done
        # rows -- a week of history -- and coalesced and cancelled ones every DONE_COUNT_EVERY
        # refreshes
        live = [PENDING, CLAIMED, FAILED]
        counts: dict[str, int] = {}
        if self.status_enabled:
            await self.refresh_status()
            for st in self.status.values():
                for state in live:
                    counts[state] = counts.get(state, 0) + st.rows.get(state, 0)
            if seldom or self.history_headroom is None:
                self.history_headroom = await history_headroom(self.stores)  # A2
        states = ([] if self.status_enabled else live) + ([DONE, COALESCED, CANCELLED] if seldom else [])
        if states:
            counts.update(await self.stores.outbox.count_by_state(states=states))
        self.metrics.rows = {**{s: self.metrics.rows.get(s, 0) for s in (DONE, COALESCED, CANCELLED)},
                             **{s: counts.get(s, 0) for s in live},
                             **{s: counts.get(s, 0) for s in states}}

    async def refresh_status(self) -> None:
        """Per-tenant status and stall detection (O1, O2), for /metrics and the probes: every
        tenant's, read from the store (the keeper's refresh)."""
        now = self.clock.now()
        # live rows only: done rows are a week of history, and this runs every refresh
        status = await tenant_statuses(self.stores, now, self.next_events, live_only=True)
        for tenant, st in status.items():
            st.stalled_for_seconds = self.stalls.observe(tenant, st.cursor, st.lag_events > 0, now)
            st.stalled = st.stalled_for_seconds > 0
        self.stalls.forget(status)
        self.status = status

    async def _figures(self) -> Figures:
        """Every tenant's counter and cursor: the poll net's last read while it is younger than
        a metrics interval (plus the poll net's own), else read now."""
        got = self.tail.figures
        fresh = self.config.service.metrics_interval_seconds + self.poll_interval
        if got is not None and self.clock.now() - got.at <= fresh:
            return got
        cursors = {t: c for t, c in (await self.stores.cursors.all()).items() if is_seq(c)}
        heads = {t: h for t, h in (await self.stores.events.heads()).items() if is_seq(h)}
        return Figures(heads=heads, cursors=cursors, at=self.clock.now())

    def own_status(self, figures: Figures) -> None:
        """A replica that is not the keeper: the status of the tenants it owns, from the poll
        net's figures (their cursor, counter and lag, stalls detected, a cursor held ahead of its
        counter), no read of its own. The rows' figures are the keeper's to report."""
        now = self.clock.now()
        status: dict[str, TenantStatus] = {}
        for t in sorted(set(figures.heads) | set(figures.cursors)):
            if not self.ownership.owns(t):
                continue
            head, cursor = figures.heads.get(t, 0), figures.cursors.get(t, 0)
            held = self.tail.cursor_ahead.get(t)
            st = TenantStatus(
                tenant_id=t, cursor=cursor, allocated_seq=head, lag_events=figures.lag(t),
                lag_seconds=0.0, oldest_pending_age_seconds=None, rows={}, dead_letters=0,
                problems=[] if held is None else [
                    f"cursor {held[0]} is ahead of the counter ({held[1]}): held until "
                    f"`board-outbox cursor reset --tenant {t} --to N`"])
            st.stalled_for_seconds = self.stalls.observe(t, cursor, st.lag_events > 0, now)
            st.stalled = st.stalled_for_seconds > 0
            status[t] = st
        self.stalls.forget(status)
        self.status = status

    async def _membership_loop(self) -> None:
        """Heartbeat (S1) every ``interval_seconds``, on a fixed cadence (a beat starts every
        interval, however long the last one took): the pauses ride it (S6), so a pause is read
        by every replica within one heartbeat of being written."""
        await self._every(self.config.membership.interval_seconds, self.membership_pass)

    async def _every(self, every: float, body: Callable[[], Awaitable[None]]) -> None:
        due = anyio.current_time()
        while not self.stopping:
            due = max(due + every, anyio.current_time())
            await anyio.sleep(max(0.0, due - anyio.current_time()))
            await body()

    async def membership_pass(self) -> None:
        """One heartbeat, whose read of the members reads the pauses too (S6; ``adopt``: it
        also releases the rows of the pauses lifted since); a changed view rescopes the stream
        and polls at once, so tenants that moved to us are drained within
        ``heartbeat_timeout_seconds`` of their owner's last beat. A failed beat keeps the last
        view and the last pauses."""
        rides = self.pauses is not None
        try:
            if await self.ownership.beat(pauses=rides):
                self._rescope_stream()
                self.request_full_poll()
        except Exception as exc:
            log.warning("heartbeat failed: %s: %s", type(exc).__name__, exc)
        if self.pauses is not None and self.ownership.pauses is not None:
            await self._adopt_pauses(self.ownership.pauses)

    async def _pause_loop(self) -> None:
        """F3: without a membership (nothing to ride), the pause set read once per
        heartbeat interval (``pause_pass``), on a fixed cadence, so a pause is read by every
        replica within one heartbeat of being written."""
        await self._every(self.config.membership.interval_seconds, self.pause_pass)

    async def pause_pass(self) -> None:
        """One read of the pauses of their own (``PauseGate.refresh``: it also releases the rows
        of the pauses lifted since); a failure keeps the last set and is logged."""
        if self.pauses is None:
            return
        released = self.pauses.released
        try:
            await self.pauses.refresh(force=True)  # the loop keeps the cadence
        except Exception as exc:
            log.warning("pause refresh failed: %s: %s", type(exc).__name__, exc)
        if self.pauses.released > released:
            self._worker_wake.set()  # the released rows are due now: no idle pause first

    async def _adopt_pauses(self, pauses: list[Pause]) -> None:
        assert self.pauses is not None
        released = self.pauses.released
        try:
            await self.pauses.adopt(pauses)
        except Exception as exc:
            log.warning("pause refresh failed: %s: %s", type(exc).__name__, exc)
        if self.pauses.released > released:
            self._worker_wake.set()  # the released rows are due now: no idle pause first

    async def _audit_loop(self) -> None:
        """A1: every ``audit.interval_seconds``, audit at most ``audit.batch_events`` events of
        the owned tenants (``BackgroundAudit.tick``); a failed pass is logged, the next retries."""
        while not self.stopping:
            try:
                cursors = (await self._figures()).cursors  # the poll net's, while fresh (S6)
                await self.audit.tick({t: c for t, c in cursors.items() if self.ownership.owns(t)})
            except Exception as exc:
                log.warning("audit pass failed: %s: %s", type(exc).__name__, exc)
            await anyio.sleep(self.config.audit.interval_seconds)

    def series_counts(self) -> SeriesCounts:
        """What this replica materialized (events it moved its tenants' cursors past), marked
        done and dead-lettered since it started."""
        return SeriesCounts(materialized=self.stats.events_passed, done=self.stats.worker.done,
                            dead=self.stats.worker.failed)

    def owned_lag(self) -> dict[str, int]:
        """Events behind per tenant this replica owns, as its last metrics refresh read them (it
        reads every counter and cursor anyway: the series costs no read of its own)."""
        return {t: n for t, n in self.metrics.lag.items() if n > 0 and self.ownership.owns(t)}

    async def _series_loop(self) -> None:
        """The console's charts: one series document once each minute has ended (``flush_due``); a failed
        flush is logged and its counts go with the next minute's."""
        assert self.series is not None
        while not self.stopping:
            try:
                await self.series.flush_due()
            except Exception as exc:
                log.warning("series pass failed: %s: %s", type(exc).__name__, exc)
            await anyio.sleep(SERIES_CHECK_SECONDS)

    async def _limits_loop(self) -> None:
        """F2: every ``limits.index_check_seconds``, the limits store's indexes are re-created
        if they are gone (``LimitStore.upkeep``: the collection dropped while we run), off every
        launch's path."""
        every = self.config.limits.index_check_seconds
        while not self.stopping:
            await anyio.sleep(every)
            await self.limits_pass()

    async def limits_pass(self) -> list[str]:
        """One check of the limits store's indexes; the names re-created (logged once each
        time). A failed check is logged and retried on the next pass."""
        assert self.stores.limits is not None
        try:
            created = await self.stores.limits.upkeep()
        except Exception as exc:
            self._once(("limits-upkeep", failure_key(exc)), logging.WARNING,
                       "could not check the limits' indexes: %s", failure_key(exc))
            return []
        if created:
            log.warning("the limits' indexes were gone (their collection dropped?): re-created "
                        "%s", ", ".join(created))
        return created

    async def _metrics_loop(self) -> None:
        while not self.stopping:
            try:
                await self.refresh_gauges()
            except Exception as exc:
                log.warning("metrics refresh failed: %s: %s", type(exc).__name__, exc)
            await anyio.sleep(self.config.service.metrics_interval_seconds)

