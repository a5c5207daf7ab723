"""The service's hot loops: the tail loop (drain passes: the poll net, the woken tenants, the
short-interval retries of the ones that stopped short) and the worker loop (work passes in lanes
that outlive a batch), and the hand-off between them (the rows the tail hands over wake the
worker; a worker with room again wakes the tenants it had none for). A part of ``Service``
(``service/runtime.py``), kept apart from its wiring and its start and stop."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import anyio

from board_outbox.engine.work.outcomes import TickResult
from board_outbox.model.errors import StoreUnavailable

if TYPE_CHECKING:
    from board_outbox.engine.flow.membership import Ownership
    from board_outbox.engine.flow.pressure import Pressure
    from board_outbox.engine.tail.tail import Tail
    from board_outbox.engine.telemetry.metrics import Metrics
    from board_outbox.engine.work.worker import EffectWorker
    from board_outbox.model.clock import Clock
    from board_outbox.service.config_sections import Config
    from board_outbox.service.stats import Stats

log = logging.getLogger("board_outbox.service")

# a tenant whose drain stopped so is drained again after tail.poll_interval_seconds, stream or
# not: a store error, a gap not yet filled (or dead), poison counting its ticks, a stall
RETRY_STOPS = frozenset({"aborted", "young_gap", "beyond_counter", "poison", "stalled"})


class HotLoops:
    """The hot half of ``Service``: the attributes below are the service's own."""

    config: Config
    clock: Clock
    tail: Tail
    worker: EffectWorker
    stats: Stats
    metrics: Metrics
    ownership: Ownership
    pressure: Pressure
    stream_open: bool
    last_poll_ok: float | None
    _awaiting_room: set[str]
    _dirty: set[str]
    _full_poll: bool
    _retry: dict[str, float]
    _poll_retry: float | None
    _passes: int
    _draining: bool
    _tail_moved: anyio.Event
    _tail_wake: anyio.Event
    _worker_wake: anyio.Event
    _worker_exited: anyio.Event

    if TYPE_CHECKING:  # the service's own (runtime.py) and the stream half's (waker.py)
        @property
        def stopping(self) -> bool: ...

        def _rescope_stream(self) -> None: ...

    # --- wakes -----------------------------------------------------------------------------

    def request_full_poll(self) -> None:
        """Drain every tenant on the next pass (the reconciliation net, on demand)."""
        self._full_poll = True
        self._tail_wake.set()

    def wake_tenant(self, tenant_id: str) -> None:
        self._dirty.add(tenant_id)
        self._tail_wake.set()

    @property
    def tail_busy(self) -> bool:
        """A drain pass runs, or one is due at once (tenants woken, a full poll asked for), or
        tenants wait for room in the worker (drained again as soon as it has some)."""
        return (self._draining or bool(self._dirty) or self._full_poll
                or bool(self._awaiting_room))

    def _tail_move(self) -> None:
        self._tail_moved.set()
        self._tail_moved = anyio.Event()

    @property
    def poll_interval(self) -> float:
        """The poll net's interval: ``tail.stream_poll_interval_seconds`` while the change stream
        is open (it wakes; the poll is only the net, C1), but never above half of
        ``tail.stall_seconds`` (a tenant the stream missed would look stalled) nor below
        ``tail.poll_interval_seconds``, the interval while it is not open (or streams are off)."""
        t = self.config.tail
        if not self.stream_open:
            return t.poll_interval_seconds
        return max(t.poll_interval_seconds, min(t.stream_poll_interval_seconds, t.stall_seconds / 2))

    @property
    def poll_requested(self) -> bool:
        """The next drain pass should be the poll net (a membership change, a lost stream...)."""
        return self._full_poll

    @property
    def woken(self) -> frozenset[str]:
        """The tenants woken since the last drain pass (by the stream or a full batch)."""
        return frozenset(self._dirty)

    # --- loops -----------------------------------------------------------------------------

    async def _tail_loop(self) -> None:
        last_poll = -float("inf")
        while not self.stopping:
            # the poll net runs every poll interval, busy or not: a tenant whose stream wake is
            # late (a stream backed up behind another tenant's burst) waits one interval at most;
            # backpressure: a replica whose store is slow polls less often
            now = anyio.current_time()
            due = last_poll + self.pressure.stretch(self.poll_interval)
            if self._poll_retry is not None:
                due = min(due, self._poll_retry)
            retry = min(self._retry.values(), default=float("inf"))
            if retry <= now:  # their short interval has passed: drained again with the woken
                ready = {t for t, at in self._retry.items() if at <= now}
                self._dirty |= ready
                self._retry = {t: at for t, at in self._retry.items() if t not in ready}
            elif not (self._dirty or self._full_poll) and now < due:
                # a wake, a retry due, or the stream closing (the interval shortens:
                # ``_stream_state``)
                self._tail_wake = anyio.Event()
                with anyio.move_on_after(min(due, retry) - now):
                    await self._tail_wake.wait()
                continue
            full = self._full_poll or now >= due
            if full:
                last_poll, self._poll_retry = now, None
            if not await self.drain_pass(full):
                await anyio.sleep(min(self.poll_interval, 1.0))

    def _retry_later(self, tenants: Iterable[str]) -> None:
        at = anyio.current_time() + self.pressure.stretch(self.config.tail.poll_interval_seconds)
        for t in tenants:
            self._retry.setdefault(t, at)

    async def drain_pass(self, full: bool) -> bool:
        """One pass of the tail loop: the poll net (``full``: every owned tenant behind its
        cursor, S2) or the tenants woken since the last pass; one batch per tenant (F1), a
        tenant with more behind its batch is woken again. False if the pass failed for a reason
        that is not the store's (the loop pauses before the next)."""
        self._passes += 1
        self._draining = True
        self._tail_move()  # a paced stream reads again now (S6)
        try:
            return await self._drain(full)
        finally:
            self._draining = False
            self._tail_move()
            if self.worker.handed:  # the pass's rows, taken together (``_received``)
                self._worker_wake.set()

    def _received(self) -> None:
        """Rows our tail handed over: an idle worker takes them at once; a busy one (rows in its
        lanes) when the tail's pass ends or a lane ends, so the rows of the pass's tenants are
        claimed together (one projection unit, one prepare read), not tenant by tenant."""
        if not self._draining or not self.worker.busy():
            self._worker_wake.set()

    async def _drain(self, full: bool) -> bool:
        tenants: list[str] | None = None
        if full:
            self._full_poll = False
            self.stats.poll_wakes += 1
            self.metrics.wake("poll")
        else:
            # only the tenants this replica owns (S1): one drained here before the membership
            # changed (a backlog keeps it woken, batch after batch) is its new owner's now, and
            # two replicas draining it would only race for its cursor (S6)
            tenants = self.ownership.owned(sorted(self._dirty))
        self._dirty.clear()
        ok = True
        try:
            if tenants is None:  # the poll net: owned tenants behind their cursor (S2)
                tenants = self.ownership.owned(await self.tail.behind())
                self._rescope_stream()
            results = await self.tail.drain_all(tenants, rounds=1)
            self._dirty.update(r.tenant_id for r in results if self.tail.more_behind(r))
            self._retry_later(r.tenant_id for r in results if r.stopped in RETRY_STOPS)
            # a tenant the worker had no room for: drained again once its rows have run
            self._awaiting_room.update(r.tenant_id for r in results if r.stopped == "no_room")
            if full and not any(r.stopped == "aborted" for r in results):
                self.last_poll_ok = self.clock.now()
        except StoreUnavailable as exc:  # tenant list unreadable: next tick
            log.warning("drain pass aborted: %s", exc)
            results = []
            self._retry_pass(full, tenants)
        except Exception as exc:
            log.error("drain pass failed (%s: %s): retrying next tick", type(exc).__name__, exc)
            results = []
            ok = False
            self._retry_pass(full, tenants)
        self.stats.drains += 1
        self.stats.last_drain = results
        for r in results:
            self.metrics.projection_materialized(r.tenant_id, self.tail.projections, r.cursor_after)
            self.stats.materialized += r.materialized
            if r.stopped != "cas_lost":
                self.stats.events_passed += r.materialized
            self.stats.rows_inserted += r.rows_inserted
            self.stats.skipped_deleted += r.skipped_deleted
            self.stats.skipped_poison += r.skipped_poison
            self.stats.cas_lost += r.stopped == "cas_lost"
        return ok

    def _retry_pass(self, full: bool, tenants: list[str] | None) -> None:
        """A pass that failed as a whole is tried again after the short poll interval: the poll
        net if it was one, else its tenants."""
        if full:
            self._poll_retry = anyio.current_time() + self.pressure.stretch(
                self.config.tail.poll_interval_seconds)
        else:
            self._retry_later(tenants or ())

    def _room_again(self) -> None:
        """The worker ran rows: the tenants it had no room for are drained again if it has
        room for them now."""
        if not self._awaiting_room:
            return
        self._awaiting_room = {t for t in self._awaiting_room if self.ownership.owns(t)}
        ready = {t for t in self._awaiting_room if self.worker.room(t) > 0}
        if ready:
            self._awaiting_room -= ready
            self._dirty |= ready
            self._tail_wake.set()

    async def _worker_loop(self) -> None:
        """The worker's passes, in lanes that outlive a batch (``EffectWorker.lanes``): a pass
        queues its claims and returns, and the next claims while a slow lane still runs. After
        a pass that claimed, the next follows at once while the lanes have room; else the loop
        waits for a wake: rows handed over, a lane that ended (room again), a pause lifted, or
        the idle pause (backing off to 4x ``idle_seconds``, longer under backpressure)."""
        idle = self.config.worker.idle_seconds
        pause = idle
        try:
            async with self.worker.lanes(self.stats.worker.add):
                while not self.stopping:
                    self._worker_wake = anyio.Event()
                    res = await self.work_pass()
                    if res is None:
                        await anyio.sleep(min(idle * 4, 1.0))
                        res = TickResult()
                    self._room_again()
                    if self.stopping:
                        break
                    # every row that ended since the last pass was lost or expired (a slow
                    # store): pause rather than claim again at once
                    ran = res.done + res.retried + res.failed + res.unrecorded + res.deferred
                    if res.claimed and self.worker.has_room() and (ran or not res.skipped_expired):
                        pause = idle
                        continue
                    with anyio.move_on_after(self.pressure.stretch(pause)):
                        await self._worker_wake.wait()
                    pause = idle if self._worker_wake.is_set() else min(pause * 2, idle * 4)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self.release_handed()
            self._worker_exited.set()

    def _lanes_moved(self) -> None:
        """A lane of the worker ended with nothing left: it has room again (the worker loop
        takes more; the tenants it had no room for are drained again)."""
        self._worker_wake.set()
        self._room_again()

    async def release_handed(self) -> None:
        """On the way out: the rows the tail handed to the worker that never started go back
        (pending, attempts unchanged), so another replica runs them now, not after their lease."""
        try:
            await self.worker.release_queued()
        except Exception as exc:  # their leases expire instead
            log.warning("could not give back the handed rows: %s", exc)

    async def work_pass(self) -> TickResult | None:
        """One pass of the worker loop: one claim across tenants (``tick_any``: the expired-lease
        sweep on its schedule, then the due rows, owned tenants first), run and marked. A store
        error is logged and counts as an empty pass; None if the pass failed for another reason
        (the loop pauses before the next)."""
        try:
            res = await self.worker.tick_any()
        except StoreUnavailable as exc:
            log.warning("worker tick failed: %s", exc)
            res = TickResult()
        except Exception as exc:
            log.error("worker tick failed (%s: %s): retrying", type(exc).__name__, exc)
            return None
        self.stats.worker.add(res)
        return res
