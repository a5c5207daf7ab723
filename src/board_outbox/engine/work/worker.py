"""The effect worker (ADR-094 "Execution"): claim due rows with a lease, execute them through the
handler registry, retry with backoff, park as a dead-letter after the attempt budget.

Every replica runs one. Correctness comes from the store: the atomic claim mints a claim_id and
every mark is fenced on it (M8), so a worker whose lease was stolen writes nothing. The worker
claims, runs and chooses each row's outcome; the completer (``completer.py``) writes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import anyio
from opentelemetry import trace

from board_outbox.engine import telemetry
from board_outbox.engine.flow.leases import Lease, Leases, Rider, current
from board_outbox.engine.flow.pause import PauseGate
from board_outbox.engine.flow.pressure import Pressure
from board_outbox.engine.handlers.registry import ExecutionContext, HandlerRegistry
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.engine.work.batch import BatchUnit
from board_outbox.engine.work.completer import Completer
from board_outbox.engine.work.handoff import HANDOFF_BATCHES, PICK_IDLES, HandoffQueue, by_priority
from board_outbox.engine.work.outcomes import Outcome, TickResult
from board_outbox.engine.work.running import Batch, BatchRunning, Open
from board_outbox.engine.work.watchdog import LoopWatch, Progress, deadline
from board_outbox.engine.work.worksettings import WorkerSettings
from board_outbox.model.bad_documents import OnceLog, cap
from board_outbox.model.clock import Clock, RandomSource, seeded_random
from board_outbox.model.errors import (
    BrokenRow,
    CoalesceHold,
    EffectTimeout,
    LeaseLost,
    OverLimit,
    PermanentEffectError,
    StoreError,
    StoreUnavailable,
    Superseded,
)
from board_outbox.model.row_documents import stuck_reason
from board_outbox.model.rows import EffectRow
from board_outbox.ports import Claim, ClaimTerms, EffectOutbox

# Lease, HANDOFF_BATCHES and PICK_IDLES are re-exported: they lived here before leases.py and
# handoff.py held them
__all__ = ["HANDOFF_BATCHES", "PICK_IDLES", "EffectWorker", "Lease", "WorkerSettings"]

log = logging.getLogger("board_outbox.worker")

# R1/R2: how often the worker looks for rows no claim can ever pick (a state outside the enum, a
# non-string tenant, a non-numeric not_before or lease...), how many it parks per look, and how
# many broken rows one tenant's claim may name in one tick before the tenant waits a tick.
SWEEP_SECONDS = 60.0
SWEEP_LIMIT = 100
BROKEN_PER_TICK = 8
# The claim size follows the backlog: it doubles (up to batch_size) while claims come back full
# and halves, down to this floor, while they come back empty.
MIN_CLAIM = 4


class EffectWorker(BatchRunning):
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

    def claim_limit(self) -> int:
        """The claim size the backlog asks for (``adapt``), capped at as many rows as run within
        half the lease at the measured pace: the tail of a batch must not outlive its lease and
        be reclaimed."""
        s = self.settings
        limit = self._want
        if self._row_seconds > 0:
            limit = max(1, min(limit, int(s.lease_seconds * 0.5 / self._row_seconds)))
        return limit if self.pressure is None else self.pressure.scale(limit)

    def adapt(self, limit: int, claimed: int) -> None:
        """Size the next claim by what this one found: a full claim means more is waiting (grow
        toward ``batch_size``); an empty one, an idle outbox (shrink toward ``MIN_CLAIM``, so a
        burst is first claimed in smaller bites and spread over the replicas that are polling);
        a partial one drained the backlog at this size (keep it)."""
        s = self.settings
        if claimed >= limit:
            self._want = min(s.batch_size, self._want * 2)
        elif claimed == 0:
            self._want = max(min(MIN_CLAIM, s.batch_size), self._want // 2)

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

    async def tick_any(self, tenants: Collection[str] | None = None) -> TickResult:
        """One claim across every tenant (S2: an idle tick is one query), owned tenants first;
        expired leases are swept by one query every ``reclaim_every_seconds``; rows no claim can
        pick are parked by ``sweep`` (R2). ``tenants`` limits the claims to those tenants (a
        test's filter; the service claims for every tenant).

        Rows handed over by our tail (``hand_off``) are claimed first, by ref. F1: they are our
        owned tenants' fresh rows; when the pick runs they take at most half the claim, the
        other half is the fair pick's (other tenants' due rows wait for the next pick at most).

        Inside open lanes (``lanes``, the service's worker loop) the claims are queued in them
        and the tick returns: its result counts them as claimed, and what became of the rows
        that ended since the last tick. The claim then takes only what the lanes have room for
        (``bound``), no handed row of a tenant whose lane holds a claim's worth already, and
        picks only with room for half a claim (a slow lane does not turn the pick into one
        query per row). Outside, the tick runs its claims to their end (``run_claims``)."""
        self.raise_failed()  # a unit raised in the open lanes since the last tick
        s = self.settings
        total = await self.sweep()
        now = self.clock.now()
        claims: list[Claim] = []
        limit = whole = self.claim_limit()
        room = self.room_in_lanes()
        if room is not None:
            limit = min(limit, room)
        pick = self._handoff.pick_due(now, stream_open=self.stream_open()) and (
            room is None or room >= max(1, whole // 2))
        # F1: when the pick runs the handed rows take half the claim (at least one row: a tick
        # with handed rows always runs one), the fair pick the rest
        claims += self._handoff.take(max(1, limit - limit // 2) if pick else limit, tenants,
                                     None if room is None else self.lane_room)
        if self._handoff.beat_due(now):
            await self._beat_queued(now)
        asked = time.monotonic()
        calls = 0
        for _ in range(BROKEN_PER_TICK):
            try:
                if now >= self._next_reclaim and len(claims) < limit and (room is None or pick):
                    calls += 1
                    want = limit - len(claims)
                    got = await self.outbox.reclaim_expired(now, s.lease_seconds, want,
                                                            tenants=tenants)
                    claims += got
                    # a full sweep means more expired leases (a dead replica's): sweep again
                    # next tick rather than in reclaim_every_seconds
                    self._next_reclaim = now + (0.0 if len(got) >= want else
                                                s.reclaim_every_seconds)
                if pick and len(claims) < limit:
                    calls += 1
                    prefer = self.prefer()
                    want = limit - len(claims)
                    picked = await self.outbox.claim_any(
                        now, s.lease_seconds, want, prefer=prefer,
                        steal_before=None if prefer is None else now - s.steal_after_seconds,
                        tenants=tenants,
                    )
                    claims += picked
                    self._handoff.picked(now, full=len(picked) >= want)
                break
            except BrokenRow as exc:  # R1: park that one row, then claim again
                total.count(await self.completer.park_broken(
                    exc.ref, None, f"row broke its claim: {exc.detail}",
                    {"row_ref": str(exc.ref)}))
            except Exception as exc:
                if isinstance(exc, StoreUnavailable) and self.pressure is not None:
                    self.pressure.failed(type(exc).__name__)
                if not claims:
                    raise
                # rows are claimed already (the hand-off's, the reclaim's): run them rather than
                # strand them until their lease ends; the next tick picks again (or fails)
                log.warning("claim failed after %d row(s) were claimed, running those: %s: %s",
                            len(claims), type(exc).__name__, cap(exc, 500))
                break
        if calls and self.pressure is not None:
            self.pressure.observe(time.monotonic() - asked)
        if limit > 0:
            self.adapt(limit, len(claims))
        claims = by_priority(claims)  # each tenant's highest priority first
        if room is None:
            res = await self.run_claims(claims)
        else:
            await self.submit(claims)
            res = self.collect()
            res.claimed += len(claims)
        total.add(res)
        return total

    def _paced(self, batch: Batch) -> None:
        """A tick's claims all left the lanes: one row's time, measured on them (an EWMA); a
        batch whose every row found its lease ended before it started claims fewer next."""
        s = self.settings
        ran = batch.rows - batch.expired
        if batch.rows and ran <= 0 and batch.expired:
            # every row's lease ran out before it started (a slow store): claim fewer
            self._row_seconds = max(self._row_seconds, s.lease_seconds / max(1, batch.rows))
        elif ran > 0:
            per_row = max(0.0, self.clock.now() - batch.started) / ran
            self._row_seconds = per_row if self._row_seconds <= 0 else (
                0.7 * self._row_seconds + 0.3 * per_row)

    async def _prepare(self, claims: list[Claim]) -> dict[str, Any]:
        """Each handler's batch read (``prepare(rows)``, optional): e.g. every subscription the
        batch's launch rows name, in one query. A failure only means per-row reads."""
        by_kind: dict[str, list[EffectRow]] = {}
        for c in claims:
            if c.row is not None:
                by_kind.setdefault(c.row.kind, []).append(c.row)
        out: dict[str, Any] = {}
        for kind, rows in by_kind.items():
            prepare = self.registry.preparing(kind)
            if prepare is None:
                continue
            what = f"handler {kind!r} prepare ({len(rows)} rows)"
            try:
                with self.watch.step(what), deadline(self.settings.max_execution_seconds, what):
                    out[kind] = await prepare.prepare(rows)
            except (StoreUnavailable, EffectTimeout) as exc:
                log.warning("batch prefetch failed, reading per row: %s", exc)
        return out

    async def sweep(self) -> TickResult:
        """Park the rows no claim can ever pick, one line each (R2); at most every
        ``SWEEP_SECONDS``. A store error only postpones the sweep."""
        res = TickResult()
        now = self.clock.now()
        if now < self._next_sweep:
            return res
        self._next_sweep = now + SWEEP_SECONDS
        try:
            stuck = await self.outbox.stuck_rows(now, SWEEP_LIMIT)
        except StoreError as exc:
            self._once(("sweep", str(exc)), logging.ERROR, "stuck-row sweep failed: %s", exc)
            return res
        for ref, doc in stuck:
            reason = stuck_reason(doc, now)
            if reason is None:
                continue
            res.count(await self.completer.park_broken(ref, None, f"unclaimable row: {reason}",
                                                       _doc_ctx(ref, doc)))
        return res

    async def execute(self, claim: Claim, *, prefetched: dict[str, Any] | None = None) -> Outcome:
        """Run one claimed row and record what became of it; return that outcome. While it runs,
        its lease is in ``inflight``, where the batch's heartbeat keeps it (O4)."""
        lease = self._leases.start(claim, self.clock.now())  # its attempt starts now
        outcome: Outcome | None = None
        try:
            outcome = await self._execute(current(lease), prefetched, lease.riders)
            return outcome
        finally:
            if outcome != "staged":  # a staged row stays in flight until its flush
                self.inflight.pop(claim.ref, None)

    @contextmanager
    def _in_flight(self, claims: Sequence[Claim]) -> Iterator[None]:
        """These claims run (a batched projection apply): their leases are in ``inflight``."""
        now = self.clock.now()
        for c in claims:
            self._leases.start(c, now)
        try:
            yield
        finally:
            for c in claims:
                if not self.completer.staged(c.ref):  # a staged row stays until its flush
                    self.inflight.pop(c.ref, None)

    async def _execute(self, claim: Claim, prefetched: dict[str, Any] | None,
                       riders: list[Rider] | None = None) -> Outcome:
        """Run the row's handler and choose what became of it; the completer records it."""
        now = self.clock.now()
        done = self.completer
        row = claim.row
        if row is not None and row.attempts >= self.settings.max_attempts:
            # M9: a hung effect burned its budget through expired leases (reclaimed now, or
            # reclaimed by a replica that gave the row back at shutdown: pending, budget spent).
            # Parked even if our lease has run out meanwhile (the park is fenced on our claim):
            # left to the next reclaim, it would count one attempt past the budget.
            return await done.park(claim, attempt=row.attempts,
                                   msg="attempt budget spent by expired leases", count_attempt=False,
                                   row=row)
        if now >= claim.lease_until:
            return "skipped_expired"  # M8: the lease is gone; whoever reclaims it runs it
        if row is None:  # parked with its bad fields replaced, so dead-letters can list it (R2)
            return await done.park_broken(claim.ref, claim.claim_id,
                                          f"malformed row: {claim.decode_error}",
                                          {"tenant_id": claim.tenant_id, "row_ref": str(claim.ref)})
        attempt = row.attempts + 1
        span = telemetry.start_execute_span(self._tracer, row, attempt=attempt)
        with trace.use_span(span, end_on_exit=True):
            try:
                if row.tenant_id != claim.tenant_id:
                    raise PermanentEffectError(
                        f"row tenant {row.tenant_id!r} claimed for tenant {claim.tenant_id!r}"
                    )
                if self.pause is not None:
                    self.pause.check(row)  # Paused: held below, as a limit defers
                handler = self.registry.handler(row.kind)
                ctx: ExecutionContext[Any] = ExecutionContext(
                    claim, self.outbox, self.clock, (prefetched or {}).get(row.kind), riders)
                what = f"handler {row.kind!r} on row {row.row_key}"
                with self.watch.step(what), deadline(self.settings.max_execution_seconds, what):
                    outcome = await handler.execute(row, ctx)
            except OverLimit as exc:  # F2: not an attempt; the row waits its turn
                span.set_attribute(telemetry.ATTR_OUTCOME, "deferred")
                span.add_event(telemetry.EVENT_DEFERRED, {telemetry.ATTR_REASON: exc.reason,
                                                          telemetry.ATTR_WAIT: exc.wait_seconds})
                return await done.defer(claim, row, exc)
            except Superseded as exc:  # coalescing: a newer row of its (subscription, card) runs
                span.set_attribute(telemetry.ATTR_OUTCOME, "coalesced")
                return await done.coalesce(claim, row, exc.into)
            except CoalesceHold as exc:  # coalescing: its burst's newest row is running now
                span.set_attribute(telemetry.ATTR_OUTCOME, "deferred")
                return await done.hold(claim, row, exc.reason, exc.wait_seconds)
            except LeaseLost as exc:
                span.set_attribute(telemetry.ATTR_OUTCOME, "lease_lost")
                log.warning("lease lost, writing nothing: %s", exc, extra=_ctx(row))
                return "lease_lost"
            except PermanentEffectError as exc:
                span.record_exception(exc)
                span.set_status(trace.StatusCode.ERROR, str(exc))
                span.set_attribute(telemetry.ATTR_OUTCOME, "failed")
                return await done.park(claim, attempt=attempt, msg=f"{type(exc).__name__}: {exc}",
                                       count_attempt=True, row=row)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:  # every other failure is retried: nothing is lost
                span.record_exception(exc)
                span.set_status(trace.StatusCode.ERROR, str(exc))
                return await done.retry(claim, attempt=attempt, exc=exc, row=row, span=span)
            span.set_attribute(telemetry.ATTR_OUTCOME, outcome)
            return await done.done(claim, row, outcome)


def _ctx(row: EffectRow) -> dict[str, object]:
    return {"tenant_id": row.tenant_id, "seq": row.seq, "row_key": row.row_key}


def _doc_ctx(ref: object, doc: dict[str, object]) -> dict[str, object]:
    return {"tenant_id": cap(doc.get("tenant_id"), 200), "row_key": cap(doc.get("row_key"), 200),
            "row_ref": str(ref)}
