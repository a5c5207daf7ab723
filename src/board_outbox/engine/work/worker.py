"""The effect worker (ADR-094 "Execution"): claim due rows with a lease, execute them through the
handler registry, retry with backoff, park as a dead-letter after the attempt budget.

Every replica runs one. Correctness comes from the store: the atomic claim mints a claim_id and
every mark is fenced on it (M8), so a worker whose lease was stolen writes nothing. The worker
claims, runs and chooses each row's outcome; the completer (``completer.py``) writes it.

Its parts are its bases: what a tick claims (``Claiming``, ``claiming.py``), one row through its
handler (``Executing``, ``executing.py``), the claims in lanes (``BatchRunning``,
``running.py``); here the worker's wiring and the hand-off from its tail.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from typing import Any

from opentelemetry import trace

from board_outbox.engine.flow.leases import Lease, Leases
from board_outbox.engine.flow.pause import PauseGate
from board_outbox.engine.flow.pressure import Pressure
from board_outbox.engine.handlers.registry import HandlerRegistry
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.engine.work.batch import BatchUnit
from board_outbox.engine.work.claiming import Claiming
from board_outbox.engine.work.completer import Completer
from board_outbox.engine.work.executing import Executing
from board_outbox.engine.work.handoff import HANDOFF_BATCHES, PICK_IDLES, HandoffQueue
from board_outbox.engine.work.running import Open
from board_outbox.engine.work.watchdog import LoopWatch, Progress
from board_outbox.engine.work.worksettings import WorkerSettings
from board_outbox.model.bad_documents import OnceLog
from board_outbox.model.clock import Clock, RandomSource, seeded_random
from board_outbox.model.rows import EffectRow
from board_outbox.ports import Claim, ClaimTerms, EffectOutbox

# Lease, HANDOFF_BATCHES and PICK_IDLES are re-exported: they lived here before leases.py and
# handoff.py held them
__all__ = ["HANDOFF_BATCHES", "PICK_IDLES", "EffectWorker", "Lease", "WorkerSettings"]

log = logging.getLogger("board_outbox.worker")


class EffectWorker(Claiming, Executing):
    def __init__(
        self,
        *,
        outbox: EffectOutbox,
        registry: HandlerRegistry,
        clock: Clock,
        settings: WorkerSettings | None = None,
        rng: RandomSource | None = None,
        on_done: Callable[[EffectRow, str], None] | None = None,
        metrics: Metrics | None = None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        self.registry = registry
        self.clock = clock
        self.settings = s = settings or WorkerSettings()
        self.rng = rng or seeded_random()
        self.stopping = False
        # the leases in flight (``inflight``) and their heartbeat; it holds ``outbox`` too
        self._leases = Leases(outbox=outbox, clock=clock, lease_seconds=s.lease_seconds,
                              max_execution_seconds=s.max_execution_seconds)
        self._tracer = trace.get_tracer("board_outbox.worker", tracer_provider=tracer_provider)
        self.completer = Completer(
            outbox=outbox, clock=clock, rng=self.rng, max_attempts=self.settings.max_attempts,
            backoff=self.settings.backoff, lease_until=self._leases.lease_until, on_done=on_done,
            metrics=metrics)
        self.completer.on_settled = self._leases.settled
        # plugin steps are named (a blocked event loop is pinned on them) and run under a deadline
        self.watch = LoopWatch(clock.now)
        self.progress = Progress(clock)
        self.batch = BatchUnit(registry=registry, clock=clock, completer=self.completer,
                               tracer=self._tracer, execute_one=self.execute, watch=self.watch,
                               max_seconds=self.settings.max_execution_seconds,
                               in_flight=self._in_flight)
        self._once = OnceLog(log)
        self._next_sweep = -float("inf")
        # S1: tenants this replica owns (None: no ownership, every row is ours)
        self.prefer: Callable[[], Collection[str] | None] = lambda: None
        self._row_seconds = 0.0  # EWMA of one row's execution time: caps the claim
        self._want = self.settings.batch_size  # the claim size the backlog asks for
        self._next_reclaim = -float("inf")
        # the rows our tail inserted born claimed for us (``receive``), taken before any pick
        self._handoff = HandoffQueue(clock=clock, batch_size=s.batch_size,
                                     lease_seconds=s.lease_seconds,
                                     heartbeat_fraction=s.heartbeat_fraction,
                                     idle_seconds=s.idle_seconds, net_seconds=s.net_pick_seconds)
        self.completer.on_pending = self._handoff.expect  # the pick runs when they are due
        # whether the change stream is open (the service's waker says): the pick is the net
        self.stream_open: Callable[[], bool] = lambda: False
        # called when rows arrive (the service wakes its worker loop)
        self.on_receive: Callable[[], None] = lambda: None
        self.pressure: Pressure | None = None  # backpressure: scales claims and room (T1)
        self._leases.on_unavailable = self._store_failed  # a lease beat that timed out
        # F3: a row whose tenant or subscription is paused is held, not run (pause.py)
        self.pause: PauseGate | None = None
        # the lanes while they are open (``running.BatchRunning.lanes``: they outlive a batch)
        self._open: Open | None = None
        # called when a lane ended with nothing left to run (the service's loop takes more)
        self.on_room: Callable[[], None] = lambda: None

    @property
    def outbox(self) -> EffectOutbox:
        return self._leases.outbox

    @outbox.setter
    def outbox(self, outbox: EffectOutbox) -> None:
        self._leases.outbox = outbox  # a swapped outbox takes the heartbeat's writes too

    @property
    def inflight(self) -> dict[Any, Lease]:
        """Row ref -> lease, while its row executes (``Leases.inflight``)."""
        return self._leases.inflight

    @property
    def metrics(self) -> Metrics | None:
        return self.completer.metrics

    @metrics.setter
    def metrics(self, metrics: Metrics | None) -> None:
        self.completer.metrics = metrics

    @property
    def on_done(self) -> Callable[[EffectRow, str], None] | None:
        """Called once per row the completer records as done (the completer holds it)."""
        return self.completer.on_done

    @on_done.setter
    def on_done(self, on_done: Callable[[EffectRow, str], None] | None) -> None:
        self.completer.on_done = on_done

    def _store_failed(self, why: str) -> None:
        if self.pressure is not None:
            self.pressure.failed(why)

    # --- the hand-off (``tail.Handoff``): ``handoff.HandoffQueue`` holds it -----------------

    def capacity(self) -> int:
        """Rows the hand-off holds at most, at the measured pace (``HandoffQueue.capacity``)."""
        return self._handoff.capacity(self._row_seconds, self.pressure)

    def room(self, tenant_id: str) -> int:
        """Rows of ``tenant_id`` this worker takes now (``HandoffQueue.room``: the rows in
        flight count against it; none while it stops)."""
        return self._handoff.room(tenant_id, self.capacity(), stopping=self.stopping,
                                  running=len(self.inflight))

    def terms(self) -> ClaimTerms | None:
        """The claim for the rows of one insert (``HandoffQueue.terms``; None while stopping)."""
        return self._handoff.terms(stopping=self.stopping)

    def receive(self, claims: Iterable[Claim]) -> None:
        """Rows our tail inserted born claimed for us (``HandoffQueue.receive``): the next ticks
        run them; a row that arrives wakes the worker loop (``on_receive``). A row this worker
        runs already (an insert of it adopted again) is not taken twice."""
        if self._handoff.receive(c for c in claims if c.ref not in self.inflight):
            self.on_receive()

    def hand_off(self, claims: Iterable[Claim]) -> None:
        """``receive`` (the name the tests and the harness use)."""
        self.receive(claims)

    @property
    def handed(self) -> int:
        """Rows waiting in the hand-off."""
        return len(self._handoff)

    @property
    def leases(self) -> list[Lease]:
        """Every lease this worker holds: the rows in flight, and the handed rows waiting."""
        return list(self.inflight.values()) + self._handoff.leases

    async def release_queued(self) -> int:
        """Give back the handed rows that never started (graceful shutdown): pending again,
        attempts unchanged, so another replica runs them now rather than after their lease."""
        return await self.completer.release(self._handoff.drain())
