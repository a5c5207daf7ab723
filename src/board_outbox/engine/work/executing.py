"""Executing one claimed row (a part of ``EffectWorker``, ``engine/work/worker.py``): its lease
in flight, the pause check, its handler under a deadline and a watched step, and the outcome
chosen from what it raised (done, retry, park, defer, coalesce, hold, lease lost), which the
completer writes; and each handler's batch read before a batch runs (``prepare``). Apart from
claiming: this runs what was claimed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import anyio
from opentelemetry import trace

from board_outbox.engine import telemetry
from board_outbox.engine.flow.leases import Rider, current
from board_outbox.engine.flow.pause import PauseGate
from board_outbox.engine.handlers.registry import ExecutionContext
from board_outbox.engine.work.outcomes import Outcome
from board_outbox.engine.work.running import BatchRunning
from board_outbox.engine.work.watchdog import LoopWatch, deadline
from board_outbox.model.errors import (
    CoalesceHold,
    EffectTimeout,
    LeaseLost,
    OverLimit,
    PermanentEffectError,
    StoreUnavailable,
    Superseded,
)
from board_outbox.model.rows import EffectRow
from board_outbox.ports import Claim, EffectOutbox

log = logging.getLogger("board_outbox.worker")


class Executing(BatchRunning):
    """The executing part of ``EffectWorker``: the attributes below are the worker's own."""

    outbox: EffectOutbox
    pause: PauseGate | None
    watch: LoopWatch
    _tracer: trace.Tracer

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
