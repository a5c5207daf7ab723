"""The completer (River's jobcompleter): the one writer of a claimed row's final state.

The worker and the projection batch unit only choose what became of a row; the completer builds
the transition (``model/transitions.py``: done, retry with backoff, park as the dead-letter, the
broken park of R1, release) and hands it to the outbox port, which applies it fenced on the claim
(M8: a stolen lease makes it a no-op).

Its done marks -- written at once, or staged while a batch runs and flushed in bulk -- are the
``DoneMarks`` half (``done_marks.py``), a base of ``Completer``; here the other transitions, one
fenced write each: retry, park, the broken park, defer, coalesce, hold, release.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
from opentelemetry import trace

from board_outbox.engine import telemetry
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.engine.work.done_marks import DoneMarks, Staged
from board_outbox.engine.work.outcomes import Outcome
from board_outbox.model import transitions as T
from board_outbox.model.backoff import BackoffPolicy
from board_outbox.model.bad_documents import OnceLog, cap
from board_outbox.model.clock import Clock, RandomSource
from board_outbox.model.errors import OverLimit, Paused, StoreError, StoreUnavailable
from board_outbox.model.pause import held_not_before
from board_outbox.model.rows import EffectRow, ErrorEntry
from board_outbox.ports import Claim, EffectOutbox

log = logging.getLogger("board_outbox.worker")


class Completer(DoneMarks):
    """Applies rows' final states. ``lease_until(claim)``: the claim's lease as the heartbeat has
    extended it (how long a done mark may keep retrying)."""

    def __init__(
        self,
        *,
        outbox: EffectOutbox,
        clock: Clock,
        rng: RandomSource,
        max_attempts: int,
        backoff: BackoffPolicy,
        lease_until: Callable[[Claim], float],
        on_done: Callable[[EffectRow, str], None] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.outbox = outbox
        self.clock = clock
        self.rng = rng
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.lease_until = lease_until
        self.on_done = on_done
        self.metrics = metrics
        self._once = OnceLog(log)
        self._staged: list[Staged] | None = None  # None: not batching, marks are written at once
        self._staged_refs: set[Any] = set()
        self._flushing = anyio.Lock()
        # how the ride-out waits between tries (tests give it the manual clock's pace)
        self.pause: Callable[[float], Awaitable[None]] = anyio.sleep
        # what became of the staged rows, flush by flush (the worker tallies and clears it)
        self.recorded: list[tuple[Claim, Outcome]] = []
        # called with the refs a flush settled (recorded or not): they leave the worker's
        # in-flight leases
        self.on_settled: Callable[[Sequence[Any]], None] = lambda refs: None
        # called with the not_before of a row given back pending (a retry, a deferral, a hold
        # of a coalescing row): the worker's pick runs then
        self.on_pending: Callable[[float], None] = lambda due: None

    async def _apply(self, claim: Claim, transition: T.Transition, ctx: dict[str, object], *,
                     could_not: str, then: str) -> Outcome | None:
        """One transition of a claimed row, fenced on its claim; None: written. A store outage
        writes nothing ("unrecorded", one warning: "could not ..."); a document that refuses the
        write ($inc, $push on a broken field) parks the row (R1: "... failed: why"); a stolen
        lease writes nothing ("lease_lost")."""
        try:
            marked = await self.outbox.apply_claimed(claim.ref, claim.claim_id, transition)
        except StoreUnavailable as exc:
            log.warning("could not %s (%s)", could_not, exc, extra=ctx)
            return "unrecorded"
        except StoreError as exc:  # R1
            return await self.park_broken(claim.ref, claim.claim_id, f"{then} failed: {exc}", ctx)
        return None if marked else "lease_lost"

    # --- retry and park -------------------------------------------------------------------------

    async def retry(
        self, claim: Claim, *, attempt: int, exc: Exception, row: EffectRow, span: trace.Span
    ) -> Outcome:
        """The attempt failed: back to pending after the backoff, or parked once the attempt
        budget is spent."""
        msg = f"{type(exc).__name__}: {exc}"
        if attempt >= self.max_attempts:
            span.set_attribute(telemetry.ATTR_OUTCOME, "failed")
            return await self.park(claim, attempt=attempt, msg=msg, count_attempt=True, row=row)
        now = self.clock.now()
        delay = self.backoff.delay(attempt, self.rng)
        span.set_attribute(telemetry.ATTR_OUTCOME, "retry")
        err = ErrorEntry(attempt=attempt, at=now, error=msg)
        # unrecorded: the row stays claimed; when its lease expires a reclaim counts the attempt
        unwritten = await self._apply(
            claim, T.retry(now=now, error=err, not_before=now + delay), _ctx(row),
            could_not="record the failed attempt", then=f"{msg}; then mark_retry")
        if unwritten is not None:
            return unwritten
        self.on_pending(now + delay)
        log.info("attempt %d failed, retry in %.1fs: %s", attempt, delay, msg, extra=_ctx(row))
        return "retried"

    async def park(
        self, claim: Claim, *, attempt: int, msg: str, count_attempt: bool,
        row: EffectRow | None = None,
    ) -> Outcome:
        """The dead-letter: state failed, the error appended."""
        now = self.clock.now()
        err = ErrorEntry(attempt=attempt, at=now, error=msg, kind="permanent")
        ctx: dict[str, object] = _ctx(row) if row else {"row_ref": str(claim.ref)}
        # unrecorded: reclaimed after the lease, and parked then
        unwritten = await self._apply(
            claim, T.park(now=now, error=err, count_attempt=count_attempt), ctx,
            could_not="park the row", then=f"{msg}; then mark_failed")
        if unwritten is not None:
            return unwritten
        if self.metrics is not None:
            self.metrics.row_failed(row.kind if row else "malformed")
        # Warned once: only the fenced transition to failed logs, and it happens once.
        log.warning("row parked as dead-letter after attempt %d: %s", attempt, cap(msg), extra=ctx)
        return "failed"

    async def park_broken(
        self, ref: object, claim_id: str | None, msg: str, ctx: dict[str, object]
    ) -> Outcome:
        """R1: park a row whose document broke a transition (or can never be claimed) with one
        ``$set`` of a clean failed state; one warning. If even that fails, one error per
        distinct problem, and the row is tried again later."""
        msg = cap(msg)
        try:
            parked = await self.outbox.park_broken(ref, self.clock.now(), msg, claim_id=claim_id)
        except StoreUnavailable as exc:
            log.warning("could not park the broken row (%s)", exc, extra=ctx)
            return "unrecorded"
        except StoreError as exc:
            self._once(("park", str(ref)), logging.ERROR,
                       "could not park the broken row (%s); it was: %s", exc, msg, extra=ctx)
            return "unrecorded"
        if not parked:
            return "lease_lost"
        if self.metrics is not None:
            self.metrics.row_failed("malformed")
        log.warning("row parked as dead-letter: %s", msg, extra=ctx)
        return "failed"

    # --- defer (F2) -----------------------------------------------------------------------------

    async def defer(self, claim: Claim, row: EffectRow, over: OverLimit) -> Outcome:
        """The launch is over a limit: pending again after ``over.wait_seconds``, attempts
        unchanged, no error appended; the row's ``waiting`` names the limit. A row whose tenant,
        subscription or bot is paused (``Paused``) is held the same way, its ``not_before``
        set aside by ``model/pause.HELD_OFFSET`` until the pause is lifted (F3)."""
        now = self.clock.now()
        paused = isinstance(over, Paused)
        not_before = held_not_before(row.not_before) if paused else now + over.wait_seconds
        # unrecorded: it stays claimed and runs again after its lease
        unwritten = await self._apply(
            claim, T.defer(now=now, not_before=not_before, reason=cap(over.reason, 300)), _ctx(row),
            could_not="defer the row", then=f"{over.reason}; then defer")
        if unwritten is not None:
            return unwritten
        if paused:  # released by the pause loop, which wakes the worker
            if self.metrics is not None:
                self.metrics.row_paused(over.scope)
            return "held"
        self.on_pending(not_before)
        if self.metrics is not None:
            self.metrics.row_limited(over.scope, over.kind)
        return "deferred"

    # --- coalescing: a burst of edits launches once -------------------------------------------

    async def coalesce(self, claim: Claim, row: EffectRow, into: str) -> Outcome:
        """Superseded by the newer row ``into``: terminal ``coalesced``, attempts unchanged,
        fenced on the claim (a stolen lease: nothing written, the new holder decides again)."""
        # unrecorded: it stays claimed and is decided again after its lease
        unwritten = await self._apply(
            claim, T.coalesce(now=self.clock.now(), into=into), _ctx(row),
            could_not="mark the row coalesced", then=f"coalesced into {into}; then the mark")
        if unwritten is not None:
            return unwritten
        if self.metrics is not None:
            self.metrics.row_coalesced()
        return "coalesced"

    async def hold(self, claim: Claim, row: EffectRow, reason: str, wait: float) -> Outcome:
        """Not decidable yet (the burst's newest row is running): pending again after ``wait``,
        attempts unchanged, no error (``coalesce_hold``)."""
        now = self.clock.now()
        unwritten = await self._apply(
            claim, T.coalesce_hold(now=now, not_before=now + wait), _ctx(row),
            could_not="defer the row", then=f"{reason}; then defer")
        if unwritten is not None:
            return unwritten
        self.on_pending(now + wait)
        return "deferred"

    # --- release --------------------------------------------------------------------------------

    async def release(self, claims: Sequence[Claim]) -> int:
        """Give claims back (graceful shutdown: another replica runs them now rather than after
        their lease); how many were released. Shielded from cancellation."""
        released = 0
        with anyio.CancelScope(shield=True):
            for claim in claims:
                try:
                    if await self.outbox.apply_claimed(claim.ref, claim.claim_id,
                                                       T.release(now=self.clock.now())):
                        released += 1
                except StoreUnavailable as exc:  # its lease expires instead
                    log.warning("could not release claim %s: %s", claim.claim_id, exc)
        return released


def _ctx(row: EffectRow) -> dict[str, object]:
    return {"tenant_id": row.tenant_id, "seq": row.seq, "row_key": row.row_key}
