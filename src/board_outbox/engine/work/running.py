"""Running a claimed batch (a part of ``EffectWorker``, ``engine/work/worker.py``): one batch read
per handler, the units in lanes (``lanes.py``), the lease heartbeat beside them (O4) and the
flush timer of the staged done marks; graceful release on shutdown."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from board_outbox.engine.flow.leases import Lease
from board_outbox.engine.work.batch import lane_of, plan
from board_outbox.engine.work.lanes import Lanes, run_lanes
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


class BatchRunning:
    """The batch half of ``EffectWorker``: the attributes below are the worker's own."""

    settings: WorkerSettings
    clock: Clock
    registry: HandlerRegistry
    completer: Completer
    progress: Progress
    batch: BatchUnit
    stopping: bool
    _leases: Leases
    _handoff: HandoffQueue

    @property
    def inflight(self) -> dict[Any, Lease]:
        raise NotImplementedError

    async def _prepare(self, claims: list[Claim]) -> dict[str, Any]:
        raise NotImplementedError

    async def execute(self, claim: Claim, *, prefetched: dict[str, Any] | None = None) -> Outcome:
        raise NotImplementedError

    async def run_claims(self, claims: list[Claim]) -> TickResult:
        """Execute claimed rows: one batch read per handler (``prepare``), projection rows of
        one projection as one unit (P2), the rest one by one; their done marks staged and
        flushed in bulk (the completer, every ``mark_flush_seconds`` and at the end); graceful
        release on shutdown."""
        res = TickResult(claimed=len(claims))
        if not claims:
            return res
        self.progress.busy = True
        self.progress.beat()
        # every claim of the batch is in flight from now until its outcome is written: the
        # heartbeat keeps the leases of the rows that wait their turn too (O4)
        now = self.clock.now()
        for c in claims:
            self.inflight.setdefault(c.ref, Lease(c, now))
        try:
            async with self.completer.batching():
                res = await self._alongside(claims, res)
            return res
        finally:
            for _claim, outcome in self.completer.recorded:
                res.count(outcome)
            self.completer.recorded.clear()
            for c in claims:
                if not self.completer.staged(c.ref):
                    self.inflight.pop(c.ref, None)
            self.progress.busy = False
            self.progress.beat()

    async def _alongside(self, claims: list[Claim], res: TickResult) -> TickResult:
        """``_run_units`` with the batch's helpers beside it: the heartbeat (O4), which extends
        the leases of the rows in flight (``inflight``) every ``lease_seconds *
        heartbeat_fraction``, and the flush timer of the staged done marks."""
        raised: list[BaseException] = []  # re-raised as itself, not in an exception group
        async with anyio.create_task_group() as tg:
            if self.settings.heartbeat_fraction > 0:
                tg.start_soon(self._heartbeat)
            tg.start_soon(self._flush_timer)
            try:
                res = await self._run_units(claims, res)
            except anyio.get_cancelled_exc_class():
                raise
            except BaseException as exc:
                raised.append(exc)
            finally:
                tg.cancel_scope.cancel()
        if raised:
            raise raised[0]
        return res

    async def _flush_timer(self) -> None:
        every = self.settings.mark_flush_seconds
        while True:
            await anyio.sleep(every)
            if self.completer.pending_marks:
                await self.completer.flush()

    async def _run_units(self, claims: list[Claim], res: TickResult) -> TickResult:
        """The batch's units in lanes, one per tenant (and one per projection unit that spans
        tenants, ``batch.lane_of``), ``concurrency`` at once (``lanes.py``)."""
        s = self.settings
        prefetched = await self._prepare(claims)
        units = (plan(claims, set(self.registry.projections), s.max_attempts)
                 if s.projection_batching else [[c] for c in claims])
        claims = [c for unit in units for c in unit]

        async def run(unit: list[Claim]) -> None:
            self.progress.beat()
            unit = [self._leases.current_claim(c) for c in unit]  # as the heartbeat extended it
            if len(unit) == 1:
                res.count(await self.execute(unit[0], prefetched=prefetched))
            else:
                for outcome in await self.batch.run(unit):
                    res.count(outcome)

        lanes = Lanes[list[Claim]]()
        try:
            await run_lanes(units, lane_of, run,
                            concurrency=s.concurrency, stopping=lambda: self.stopping,
                            lanes=lanes)
        except anyio.get_cancelled_exc_class():
            # Cancelled past the shutdown grace period: the interrupted units and the rest go
            # back.
            finished = {c.ref for unit in lanes.finished for c in unit}
            res.released += await self.completer.release(
                self._unstaged([c for c in claims if c.ref not in finished]))
            raise
        if self.stopping:
            # Graceful shutdown: give back what we did not start, so another replica runs it
            # now rather than after the lease expires.
            started = {c.ref for unit in lanes.started for c in unit}
            res.released += await self.completer.release(
                self._unstaged([c for c in claims if c.ref not in started]))
        return res

    def _unstaged(self, claims: Sequence[Claim]) -> list[Claim]:
        """The claims whose done mark is not waiting for a flush (a staged row ran: it is not
        given back)."""
        return [c for c in claims if not self.completer.staged(c.ref)]

    async def _heartbeat(self) -> None:
        """The one heartbeat of a claimed batch: every beat extends every lease in flight, and
        those of the handed rows that wait their turn."""
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
