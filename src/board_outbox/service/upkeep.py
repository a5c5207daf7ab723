"""The service's background loops beside the tail and the worker: the gauges and per-tenant
status (the metrics refresh), the membership heartbeat, the pauses, the completeness audit, the
rolling series and the limits' indexes. A part of ``Service`` (``service/runtime.py``), kept
apart from its hot loops; each loop outlives its dependency failing (R1)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

from board_outbox.model.domain import CLAIMED, COALESCED, DONE, FAILED, PENDING
from board_outbox.model.series import SeriesCounts
from board_outbox.service.health import TenantStatus, history_headroom, tenant_statuses
from board_outbox.service.waker import failure_key

if TYPE_CHECKING:
    from board_outbox.engine.audit import BackgroundAudit
    from board_outbox.engine.membership import Ownership
    from board_outbox.engine.pause import PauseGate
    from board_outbox.engine.series import SeriesRecorder
    from board_outbox.engine.telemetry.metrics import Metrics
    from board_outbox.model.clock import Clock
    from board_outbox.model.validation import OnceLog
    from board_outbox.ports import Stores
    from board_outbox.service.config import Config
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

    def request_full_poll(self) -> None:
        raise NotImplementedError

    def _rescope_stream(self) -> None:
        raise NotImplementedError

    async def refresh_gauges(self) -> None:
        """Tail lag per tenant (allocated seq - cursor) and rows by state, for the gauges."""
        heads, cursors = await self.stores.events.heads(), await self.stores.cursors.all()
        self.metrics.lag = {t: max(0, h - cursors.get(t, 0)) for t, h in heads.items()}
        # the live states and the dead-letters every refresh (each count over its state's
        # partial index); done rows -- a week of history -- every DONE_COUNT_EVERY refreshes
        states = [PENDING, CLAIMED, FAILED]
        if self._gauge_refreshes % DONE_COUNT_EVERY == 0:
            states += [DONE, COALESCED]  # the coalesced rows are a week of history too
        self._gauge_refreshes += 1
        counts = await self.stores.outbox.count_by_state(states=states)
        self.metrics.rows = {**{s: self.metrics.rows.get(s, 0) for s in (DONE, COALESCED)},
                             **{s: counts.get(s, 0) for s in states}}
        if self.status_enabled:
            await self.refresh_status()
            self.history_headroom = await history_headroom(self.stores)  # A2

    async def refresh_status(self) -> None:
        """Per-tenant status and stall detection (O1, O2), for /metrics and /readyz."""
        now = self.clock.now()
        # live rows only: done rows are a week of history, and this runs every refresh
        status = await tenant_statuses(self.stores, now, self.next_events, live_only=True)
        for tenant, st in status.items():
            st.stalled_for_seconds = self.stalls.observe(tenant, st.cursor, st.lag_events > 0, now)
            st.stalled = st.stalled_for_seconds > 0
        self.stalls.forget(status)
        self.status = status

    async def _membership_loop(self) -> None:
        """Heartbeat (S1) every ``interval_seconds``."""
        every = self.config.membership.interval_seconds
        while not self.stopping:
            await anyio.sleep(every)
            await self.membership_pass()

    async def membership_pass(self) -> None:
        """One heartbeat; a changed view rescopes the stream and polls at once, so tenants that
        moved to us are drained within ``heartbeat_timeout_seconds`` of their owner's last beat."""
        try:
            if await self.ownership.beat():
                self._rescope_stream()
                self.request_full_poll()
        except Exception as exc:
            log.warning("heartbeat failed: %s: %s", type(exc).__name__, exc)

    async def _pause_loop(self) -> None:
        """Issue 33: the pause set, read once per membership heartbeat (``pause_pass``), on a
        fixed cadence (a read starts every heartbeat, however long the last one took), so a
        pause is read by every replica within one heartbeat of being written."""
        every = self.config.membership.interval_seconds
        due = anyio.current_time()
        while not self.stopping:
            due = max(due + every, anyio.current_time())
            await anyio.sleep(max(0.0, due - anyio.current_time()))
            await self.pause_pass()

    async def pause_pass(self) -> None:
        """One read of the pauses (``PauseGate.refresh``: it also releases the rows of the pauses
        lifted since); a failure keeps the last set and is logged."""
        if self.pauses is None:
            return
        released = self.pauses.released
        try:
            await self.pauses.refresh(force=True)  # the loop keeps the cadence
        except Exception as exc:
            log.warning("pause refresh failed: %s: %s", type(exc).__name__, exc)
        if self.pauses.released > released:
            self._worker_wake.set()  # the released rows are due now: no idle pause first

    async def _audit_loop(self) -> None:
        """A1: every ``audit.interval_seconds``, audit at most ``audit.batch_events`` events of
        the owned tenants (``BackgroundAudit.tick``); a failed pass is logged, the next retries."""
        while not self.stopping:
            try:
                cursors = await self.stores.cursors.all()
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
        """Issue 33: one series document once each minute has ended (``flush_due``); a failed
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

