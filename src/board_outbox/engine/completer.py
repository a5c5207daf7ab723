"""The completer (River's jobcompleter): the one writer of a claimed row's final state.

The worker and the projection batch unit only choose what became of a row; the completer builds
the transition (``model/transitions.py``: done, retry with backoff, park as the dead-letter, the
broken park of R1, release) and hands it to the outbox port, which applies it fenced on the claim
(M8: a stolen lease makes it a no-op). A done mark rides out a store outage while the lease lasts
(one loop, for a single row and for a group); a batch's done marks go out grouped by (claim_id,
outcome label), one fenced multi-row write per group.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio
from opentelemetry import trace

from board_outbox.engine import telemetry
from board_outbox.engine.outcomes import Outcome
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.model import transitions as T
from board_outbox.model.backoff import BackoffPolicy
from board_outbox.model.clock import Clock, RandomSource
from board_outbox.model.domain import EffectRow, ErrorEntry
from board_outbox.model.errors import OverLimit, StoreError, StoreUnavailable
from board_outbox.model.validation import OnceLog, cap
from board_outbox.ports import Claim, EffectOutbox

log = logging.getLogger("board_outbox.worker")
R = TypeVar("R")

# Pauses between done-mark attempts after a store blip (about 3 s in all, and never past the
# lease). Each attempt is itself bounded by the store op timeout.
MARK_DONE_BACKOFF = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)


class Completer:
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

    # --- done -----------------------------------------------------------------------------------

    async def done(self, claim: Claim, row: EffectRow, outcome: str) -> Outcome:
        """The effect happened with this outcome label: record it (riding out a store outage
        while the lease lasts)."""
        done_at = self.clock.now()
        try:
            marked = await self._ride_out(
                lambda: self.outbox.apply_claimed(claim.ref, claim.claim_id,
                                                  T.done(now=done_at, outcome=outcome)),
                lambda: self.lease_until(claim), "effect done but not recorded (%s): the row runs again "
                "after its lease", _ctx(row))
        except StoreError as exc:  # R1: the row's document refuses the write
            return await self.park_broken(
                claim.ref, claim.claim_id,
                f"effect done ({outcome}) but mark_done failed: {exc}", _ctx(row))
        if marked is None:
            return "unrecorded"
        if not marked:
            log.warning("lease lost before mark_done (late write was a no-op)", extra=_ctx(row))
            return "lease_lost"
        self._count_done(row, outcome, done_at)
        return "done"

    async def done_many(
        self, claims: Sequence[Claim], labels: Sequence[str], tenant_id: str,
        result: list[Outcome] | None = None,
    ) -> list[Outcome]:
        """The effects of several claimed rows happened (``labels[i]`` for ``claims[i]``): one
        fenced write per (claim_id, outcome label), each riding out a store outage while the
        group's leases last. One outcome per claim, written into ``result`` group by group (so a
        caller whose write raised midway knows which rows were recorded)."""
        done_at = self.clock.now()
        groups: dict[tuple[str, str], list[int]] = {}
        for i, (c, label) in enumerate(zip(claims, labels, strict=True)):
            groups.setdefault((c.claim_id, label), []).append(i)
        if result is None:
            result = ["unrecorded"] * len(claims)
        for (claim_id, label), idx in groups.items():
            group = [claims[i] for i in idx]
            marked = await self._done_group(group, claim_id, T.done(now=done_at, outcome=label),
                                            tenant_id)
            if marked is None:
                continue
            for i in idx:
                row = claims[i].row
                assert row is not None
                if claims[i].ref not in marked:
                    result[i] = "lease_lost"
                    log.warning("lease lost before mark_done (late write was a no-op)",
                                extra=_ctx(row))
                    continue
                result[i] = "done"
                self._count_done(row, label, done_at)
        return result

    async def _done_group(
        self, group: list[Claim], claim_id: str, t: T.Transition, tenant_id: str
    ) -> set[Any] | None:
        refs = [c.ref for c in group]

        async def write() -> set[Any]:
            return set(await self.outbox.apply_claimed_many(refs, claim_id, t))

        return await self._ride_out(
            write, lambda: min(self.lease_until(c) for c in group),
            f"{len(refs)} effects done but not recorded (%s): they run again after their lease",
            {"tenant_id": tenant_id})

    async def _ride_out(
        self, write: Callable[[], Awaitable[R]], lease_until: Callable[[], float], lost: str,
        ctx: dict[str, object],
    ) -> R | None:
        """Run a done write, riding out a store outage for as long as the lease lasts (a lost
        done mark means the row runs again after its lease -- ADR-094's second residual window --
        so giving up early only makes that double certain). None: not recorded."""
        delays = iter(MARK_DONE_BACKOFF)
        while True:
            try:
                return await write()
            except StoreUnavailable as exc:
                delay = next(delays, None)
                if delay is None or self.clock.now() + delay >= lease_until():
                    log.error(lost, exc, extra=ctx)
                    return None
                await anyio.sleep(delay)

    def _count_done(self, row: EffectRow, outcome: str, done_at: float) -> None:
        if self.metrics is not None:
            self.metrics.row_done(row, done_at)
        if self.on_done is not None:
            self.on_done(row, outcome)

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
        try:
            marked = await self.outbox.apply_claimed(
                claim.ref, claim.claim_id, T.retry(now=now, error=err, not_before=now + delay))
        except StoreUnavailable as store_exc:
            # The row stays claimed; when its lease expires a reclaim counts the attempt.
            log.warning("could not record the failed attempt (%s)", store_exc, extra=_ctx(row))
            return "unrecorded"
        except StoreError as store_exc:  # R1: the row's document refuses $inc / $push
            return await self.park_broken(
                claim.ref, claim.claim_id, f"{msg}; then mark_retry failed: {store_exc}", _ctx(row))
        if not marked:
            return "lease_lost"
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
        try:
            marked = await self.outbox.apply_claimed(
                claim.ref, claim.claim_id, T.park(now=now, error=err, count_attempt=count_attempt))
        except StoreUnavailable as store_exc:
            # reclaimed after the lease, and parked then
            log.warning("could not park the row (%s)", store_exc, extra=ctx)
            return "unrecorded"
        except StoreError as store_exc:  # R1: the row's document refuses $inc / $push
            return await self.park_broken(
                claim.ref, claim.claim_id, f"{msg}; then mark_failed failed: {store_exc}", ctx)
        if not marked:
            return "lease_lost"
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
        unchanged, no error appended; the row's ``waiting`` names the limit."""
        now = self.clock.now()
        try:
            marked = await self.outbox.apply_claimed(
                claim.ref, claim.claim_id,
                T.defer(now=now, not_before=now + over.wait_seconds, reason=cap(over.reason, 300)))
        except StoreUnavailable as exc:  # stays claimed; it runs again after its lease
            log.warning("could not defer the row (%s)", exc, extra=_ctx(row))
            return "unrecorded"
        except StoreError as exc:  # R1
            return await self.park_broken(claim.ref, claim.claim_id,
                                          f"{over.reason}; then defer failed: {exc}", _ctx(row))
        if not marked:
            return "lease_lost"
        if self.metrics is not None:
            self.metrics.row_limited(over.scope, over.kind)
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
