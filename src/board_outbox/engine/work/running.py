"""Running claimed rows (a part of ``EffectWorker``, ``engine/work/worker.py``): one batch read per
handler for a tick's claims, their units in lanes (``lanes.LanePool``), the one lease heartbeat
beside them (O4) and the flush timer of the staged done marks; graceful release on shutdown.

The lanes outlive a batch while they are open (``lanes``: the service's worker loop holds them
open for its life): ``tick_any`` queues its claims in them and returns, and the next tick claims
while a slow lane still runs, so another tenant's new rows wait for their own lane only. The
rows in the lanes are bounded (``bound``: twice a claim, so scaled by the backpressure like the
claims), a lane holds at most a claim's worth of handed rows (``lane_room``), the heartbeat keeps
every lease in flight, the completer still writes the done marks in bulk (one stage for the
lanes' life, flushed by the timer), and on the way out what never started is given back.
Outside (``run_claims``, each test's and the harness's tick) one batch runs on lanes of its own,
opened and closed around it, as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from board_outbox.engine.flow.leases import Lease
from board_outbox.engine.work.batch import lane_of, plan, tenant_lane
from board_outbox.engine.work.lanes import LanePool
from board_outbox.engine.work.outcomes import TickResult
from board_outbox.ports import Claim

if TYPE_CHECKING:
    from board_outbox.engine.flow.leases import Leases
    from board_outbox.engine.handlers.registry import HandlerRegistry
    from board_outbox.engine.work.batch import BatchUnit
    from board_outbox.engine.work.completer import Completer
    from board_outbox.engine.work.handoff import HandoffQueue
    from board_outbox.engine.work.outcomes import Outcome
    from board_outbox.engine.work.watchdog import Progress
    from board_outbox.engine.work.worksettings import WorkerSettings
    from board_outbox.model.clock import Clock


@dataclass(eq=False)
class Batch:
    """One tick's claims in the lanes: when its last unit ends, the pace is measured on it."""

    rows: int
    started: float
    units: int = 0
    expired: int = 0


@dataclass(eq=False)
class Job:
    """One unit of a tick's claims (one row, or one projection's rows, ``batch.plan``)."""

    claims: list[Claim]
    prefetched: dict[str, Any]
    batch: Batch


@dataclass(eq=False)
class Open:
    """Open lanes: the pool, what became of the rows since the last look (``tally``), the rows
    in the lanes (queued or running) in all and by tenant."""

    pool: LanePool[Job]
    tally: TickResult = field(default_factory=TickResult)
    rows: int = 0
    by_tenant: Counter[str] = field(default_factory=Counter)


class BatchRunning:
    """The running half of ``EffectWorker``: the attributes below are the worker's own."""

    settings: WorkerSettings
    clock: Clock
    registry: HandlerRegistry
    completer: Completer
    progress: Progress
    batch: BatchUnit
    stopping: bool
    _leases: Leases
    _handoff: HandoffQueue
    _open: Open | None
    # called when a lane ended with nothing left (the worker may take more), or a unit raised
    on_room: Callable[[], None]

    @property
    def inflight(self) -> dict[Any, Lease]:
        raise NotImplementedError

    async def _prepare(self, claims: list[Claim]) -> dict[str, Any]:
        raise NotImplementedError

    async def execute(self, claim: Claim, *, prefetched: dict[str, Any] | None = None) -> Outcome:
        raise NotImplementedError

    def _paced(self, batch: Batch) -> None:
        raise NotImplementedError

    def claim_limit(self) -> int:
        raise NotImplementedError

    # --- open lanes --------------------------------------------------------------------------

    @asynccontextmanager
    async def lanes(self, last: Callable[[TickResult], None] | None = None,
                    ) -> AsyncIterator[None]:
        """Lanes that outlive the batch, open for the body (the service's worker loop): each
        ``tick_any`` inside queues its claims and returns; their outcomes come back in later
        ticks' results. On the way out nothing more starts, what runs ends (or, cancelled past
        the shutdown grace, is given back with the rest) and what never started is given back
        while stopping; ``last`` is told what became of the rows since the last tick."""
        if self._open is not None:
            yield
            return
        run: Open | None = None
        try:
            async with self._lanes_open() as run:
                yield
        finally:
            if run is not None and last is not None:
                last(run.tally)

    def bound(self) -> int:
        """Rows the open lanes hold at most (queued or running): two claims' worth, so a claim
        is queued while the one before runs, and a slow lane's rows leave the others room."""
        return 2 * self.claim_limit()

    def room_in_lanes(self) -> int | None:
        """Rows the open lanes take now (None: no lanes open, a tick runs its own batch)."""
        run = self._open
        return None if run is None else max(0, self.bound() - run.rows)

    def busy(self) -> bool:
        """Whether rows run or wait in the open lanes."""
        return self._open is not None and self._open.rows > 0

    def has_room(self) -> bool:
        """Whether a tick now may claim more (no lanes open: always)."""
        room = self.room_in_lanes()
        return room is None or room > 0

    def lane_room(self, tenant_id: str) -> int:
        """The handed rows of this tenant a tick may queue in the open lanes: a lane holds at
        most a claim's worth (the rest wait in the hand-off, their leases kept)."""
        return max(1, self.claim_limit()) - self.held(tenant_id)

    def held(self, tenant_id: str) -> int:
        """The rows of this tenant in the open lanes (queued or running)."""
        return 0 if self._open is None else self._open.by_tenant.get(tenant_id, 0)

    def collect(self) -> TickResult:
        """What became of the rows in the open lanes since the last look (the flushes' verdicts
        included); ``run_claims``: of its own batch."""
        run = self._open
        if run is None:
            return TickResult()
        self._recorded(run)
        out, run.tally = run.tally, TickResult()
        return out

    def raise_failed(self) -> None:
        """A unit raised in the open lanes: what it left queued is dropped (its leases end, as
        when a batch failed) and the error is raised here, the lanes free to run again."""
        run = self._open
        if run is None or run.pool.error is None:
            return
        for job in run.pool.take_waiting():
            self._ended(job, ran=False)
        error = run.pool.take_error()
        assert error is not None
        raise error

    async def run_claims(self, claims: list[Claim]) -> TickResult:
        """Execute claimed rows to their end, on lanes of their own: one batch read per handler
        (``prepare``), projection rows of one projection as one unit (P2), the rest one by
        one; their done marks staged and flushed in bulk (the completer, every
        ``mark_flush_seconds`` and at the end); graceful release on shutdown."""
        if not claims:
            return TickResult()
        if self._open is not None:
            raise RuntimeError("run_claims runs a batch on lanes of its own: not in open lanes")
        async with self._lanes_open() as run:
            await self.submit(claims)
            await run.pool.wait_settled()
            self.raise_failed()
        res = run.tally
        res.claimed = len(claims)
        return res

    @asynccontextmanager
    async def _lanes_open(self) -> AsyncIterator[Open]:
        """The pool with its helpers (the heartbeat, O4, and the flush timer) in one task group,
        inside the completer's stage of done marks (flushed at the end, shielded). An error of
        the body is raised as itself once the lanes stopped, not in an exception group."""
        run: Open | None = None
        raised: list[BaseException] = []
        async with self.completer.batching():
            try:
                async with anyio.create_task_group() as tg:
                    if self.settings.heartbeat_fraction > 0:
                        tg.start_soon(self._heartbeat)
                    tg.start_soon(self._flush_timer)
                    lane = lane_of if self.settings.projection_batching else tenant_lane
                    pool = LanePool[Job](tg, lambda job: lane(job.claims), self._run_job,
                                         concurrency=self.settings.concurrency,
                                         stopping=lambda: self.stopping)
                    self._open = run = Open(pool)
                    pool.on_end = lambda job, ok: self._ended(job, ran=True)
                    pool.on_lane_done = lambda: self.on_room()
                    try:
                        yield run
                        await pool.wait_settled()
                    except anyio.get_cancelled_exc_class():
                        raise
                    except BaseException as exc:
                        raised.append(exc)
                    finally:
                        tg.cancel_scope.cancel()  # the heartbeat, the timer, any lane left
            finally:
                if run is not None:  # before the last flush: a staged row is not given back
                    await self._closed(run)
                self._open = None
        if run is not None:
            self._recorded(run)
        if raised:
            raise raised[0]

    async def _closed(self, run: Open) -> None:
        """The lanes stopped: the units interrupted (cancelled past the shutdown grace) and, while
        stopping, those never started are given back (pending again, attempts unchanged), so
        another replica runs them now rather than after their lease; a staged row ran, and
        stays. A failed batch's units never started are dropped (their leases end)."""
        back = [c for job in run.pool.interrupted for c in job.claims]
        run.pool.interrupted.clear()
        waiting = run.pool.take_waiting()
        if self.stopping or back:
            back += [c for job in waiting for c in job.claims]
        for job in waiting:
            self._ended(job, ran=False)
        if back:
            run.tally.released += await self.completer.release(self._unstaged(back))

    def _recorded(self, run: Open) -> None:
        """The flushes' verdicts on the staged rows, into the tally."""
        for _claim, outcome in self.completer.recorded:
            run.tally.count(outcome)
        self.completer.recorded.clear()

    # --- one tick's claims in the lanes --------------------------------------------------------

    async def submit(self, claims: list[Claim]) -> None:
        """Queue a tick's claims in the open lanes: one batch read per handler (``prepare``),
        then the units of ``batch.plan``. Every claim is in flight from now until its outcome
        is written: the heartbeat keeps the leases of the rows that wait their turn too (O4)."""
        run = self._open
        if run is None or not claims:
            return
        now = self.clock.now()
        batch = Batch(rows=len(claims), started=now)
        for c in claims:
            self.inflight.setdefault(c.ref, Lease(c, now))
            run.by_tenant[c.tenant_id] += 1
        run.rows += len(claims)
        self.progress.busy = True
        self.progress.beat()
        s = self.settings
        try:
            prefetched = await self._prepare(claims)
        except BaseException:
            for c in claims:
                self._gone(run, c)
            raise
        units = (plan(claims, set(self.registry.projections), s.max_attempts)
                 if s.projection_batching else [[c] for c in claims])
        batch.units = len(units)
        run.pool.submit([Job(unit, prefetched, batch) for unit in units])

    async def _run_job(self, job: Job) -> None:
        self.progress.beat()
        unit = [self._leases.current_claim(c) for c in job.claims]  # as the heartbeat extended it
        run = self._open
        if len(unit) == 1:
            outcomes = [await self.execute(unit[0], prefetched=job.prefetched)]
        else:
            outcomes = await self.batch.run(unit)
        for outcome in outcomes:
            if run is not None:
                run.tally.count(outcome)
            job.batch.expired += outcome == "skipped_expired"

    def _ended(self, job: Job, *, ran: bool) -> None:
        """A unit left the lanes: it ran (to its end or not), or it never started (given back or
        dropped: not in its batch's pace)."""
        run = self._open
        if run is None:
            return
        for c in job.claims:
            self._gone(run, c)
        batch = job.batch
        batch.units -= 1
        if not ran:
            batch.rows -= len(job.claims)
        if batch.units == 0:
            self._paced(batch)
        self.progress.beat()

    def _gone(self, run: Open, c: Claim) -> None:
        run.rows -= 1
        left = run.by_tenant[c.tenant_id] - 1
        if left > 0:
            run.by_tenant[c.tenant_id] = left
        else:
            del run.by_tenant[c.tenant_id]
        if not self.completer.staged(c.ref):  # a staged row stays in flight until its flush
            self.inflight.pop(c.ref, None)
        self.progress.busy = run.rows > 0

    def _unstaged(self, claims: Sequence[Claim]) -> list[Claim]:
        """The claims whose done mark is not waiting for a flush (a staged row ran: it is not
        given back)."""
        return [c for c in claims if not self.completer.staged(c.ref)]

    # --- beside the lanes ------------------------------------------------------------------------

    async def _flush_timer(self) -> None:
        every = self.settings.mark_flush_seconds
        while True:
            await anyio.sleep(every)
            if self.completer.pending_marks:
                await self.completer.flush()

    async def _heartbeat(self) -> None:
        """The one heartbeat of the lanes: every beat extends every lease in flight, and those
        of the handed rows that wait their turn."""
        every = self.settings.lease_seconds * self.settings.heartbeat_fraction
        while True:
            await anyio.sleep(every)
            await self.extend_many(list(self.inflight.values()) +
                                   self._handoff.due(self.clock.now()))
            self._handoff.next_beat = self.clock.now() + every

    async def _beat_queued(self, now: float) -> None:
        """The handed rows' leases, between batches (one write per claim they were born
        under); a row whose lease was lost meanwhile leaves the hand-off."""
        leases = self._handoff.beat(now)  # none with the heartbeat off
        if leases:
            await self.extend_many(leases)
            self._handoff.dequeue([x for x in leases if x.stopped])

    async def extend(self, lease: Lease) -> bool:
        """One heartbeat of one lease (``Leases.extend``). False: its heartbeat stops."""
        return await self._leases.extend(lease)

    async def extend_many(self, leases: Collection[Lease]) -> None:
        """One beat over these leases (``Leases.extend_many``: one fenced write per claim)."""
        await self._leases.extend_many(leases)
