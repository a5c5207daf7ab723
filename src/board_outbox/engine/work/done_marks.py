"""Done marks, the done half of the completer (``completer.py``): a done mark rides out a store
outage while the lease lasts (one loop, ``_ride_out``, for a single row and for a group).

In bulk (River's batch completer): while the worker runs a claimed batch (``batching``), a done
mark is staged, not written; ``flush`` writes every staged mark in one fenced bulk write
(``EffectOutbox.apply_marks``) -- at the end of the batch, and every ``flush_seconds`` while it
runs, so a launch's done mark waits at most that long (ADR-094's launch -> done window: a crash
in it doubles the rows staged, never more). The worker counts what became of each row once its
flush says.

Apart from the completer's other transitions: only a done mark is staged, flushed and ridden out.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.engine.work.outcomes import Outcome
from board_outbox.model import transitions as T
from board_outbox.model.clock import Clock
from board_outbox.model.errors import StoreError, StoreUnavailable
from board_outbox.model.rows import EffectRow
from board_outbox.ports import Claim, EffectOutbox

log = logging.getLogger("board_outbox.worker")
R = TypeVar("R")

# Pauses between done-mark attempts after a store blip, the last repeated until the lease ends
# (a done mark that gives up early makes the row run again: ADR-094's second window). Each
# attempt is itself bounded by the store op timeout.
MARK_DONE_BACKOFF = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)


@dataclass
class Staged:
    """A done mark waiting for the flush: the effect of ``claim`` happened with ``label``."""

    claim: Claim
    row: EffectRow
    label: str
    done_at: float


class DoneMarks:
    """The done half of ``Completer``: the attributes below are the completer's own."""

    outbox: EffectOutbox
    clock: Clock
    lease_until: Callable[[Claim], float]
    on_done: Callable[[EffectRow, str], None] | None
    metrics: Metrics | None
    pause: Callable[[float], Awaitable[None]]
    recorded: list[tuple[Claim, Outcome]]
    on_settled: Callable[[Sequence[Any]], None]
    _staged: list[Staged] | None
    _staged_refs: set[Any]
    _flushing: anyio.Lock

    async def park_broken(
        self, ref: object, claim_id: str | None, msg: str, ctx: dict[str, object]
    ) -> Outcome:
        raise NotImplementedError

    # --- done -----------------------------------------------------------------------------------

    @asynccontextmanager
    async def batching(self) -> AsyncIterator[None]:
        """Inside, done marks are staged and written by ``flush`` (called by the worker's timer
        and here, at the end, shielded: the effects happened, their marks must go out)."""
        if self._staged is not None:  # already batching (a nested batch): one flush, the outer
            yield
            return
        self._staged = []
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await self.flush()
            self._staged = None

    def staged(self, ref: Any) -> bool:
        """Is this row's done mark waiting for a flush?"""
        return ref in self._staged_refs

    @property
    def pending_marks(self) -> int:
        return 0 if self._staged is None else len(self._staged)

    async def flush(self) -> None:
        """Write every staged done mark in one fenced bulk write, riding out a store outage
        until the first of their leases ends; what became of each row goes to ``recorded``.
        A flush cancelled midway (the batch's timer, stopped when the batch ends) puts its marks
        back for the batch's closing flush: a mark taken off the stage is never dropped (a
        write that had landed is found by the retry's read back)."""
        async with self._flushing:
            if not self._staged:
                return
            batch = list(self._staged)
            self._staged.clear()
            refs = [x.claim.ref for x in batch]
            try:
                await self._flush(batch)
            except anyio.get_cancelled_exc_class():
                if self._staged is not None:
                    self._staged[:0] = batch
                    raise
                self._settle(refs)
                raise
            except BaseException:
                self._settle(refs)
                raise
            self._settle(refs)

    def _settle(self, refs: list[Any]) -> None:
        self._staged_refs.difference_update(refs)
        self.on_settled(refs)

    async def _flush(self, batch: list[Staged]) -> None:
        # one transition object per (claim, label), stamped with the flush's time (when the rows'
        # documents are written; each row's own finish time feeds the metrics): the adapter
        # writes each group as one fenced update of many rows
        now = self.clock.now()
        by_label: dict[tuple[str, str], T.Transition] = {}
        marks = []
        for x in batch:
            key = (x.claim.claim_id, x.label)
            t = by_label.get(key)
            if t is None:
                t = by_label[key] = T.done(now=now, outcome=x.label)
            marks.append(T.Mark(x.claim.ref, x.claim.claim_id, t))
        try:
            moved = await self._ride_out(
                lambda: self.outbox.apply_marks(marks),
                lambda: min(self.lease_until(x.claim) for x in batch),
                f"{len(batch)} effects done but not recorded (%s): they run again after their "
                "lease", {"tenant_id": batch[0].claim.tenant_id})
        except StoreError:  # R1: a row refuses its mark: each on its own, the broken one parked
            alone = [(x.claim, await self._mark_alone(x, m)) for x, m in zip(batch, marks, strict=True)]
            self.recorded.extend(alone)  # after every await: a cancelled flush records nothing
            return
        if moved is None:
            self.recorded.extend((x.claim, "unrecorded") for x in batch)
            return
        went = set(moved)
        for x in batch:
            if x.claim.ref in went:
                self._count_done(x.row, x.label, x.done_at)
                self.recorded.append((x.claim, "done"))
            else:
                log.warning("lease lost before mark_done (late write was a no-op)",
                            extra=_ctx(x.row))
                self.recorded.append((x.claim, "lease_lost"))

    async def _mark_alone(self, x: Staged, m: T.Mark) -> Outcome:
        """One staged mark on its own, after its bulk write was refused (some of its marks may
        have landed: a mark that finds its row done under its claim was one of those)."""
        try:
            moved = await self.outbox.apply_marks([m])
        except StoreUnavailable as exc:
            log.error("effect done but not recorded (%s): the row runs again after its lease", exc,
                      extra=_ctx(x.row))
            return "unrecorded"
        except StoreError as exc:
            return await self.park_broken(x.claim.ref, x.claim.claim_id,
                                          f"effect done ({x.label}) but mark_done failed: {exc}",
                                          _ctx(x.row))
        if not moved:
            log.warning("lease lost before mark_done (late write was a no-op)", extra=_ctx(x.row))
            return "lease_lost"
        self._count_done(x.row, x.label, x.done_at)
        return "done"

    async def done(self, claim: Claim, row: EffectRow, outcome: str) -> Outcome:
        """The effect happened with this outcome label: record it (riding out a store outage
        while the lease lasts) -- or, while batching, stage it for the next flush."""
        done_at = self.clock.now()
        if self._staged is not None:
            self._staged.append(Staged(claim, row, outcome, done_at))
            self._staged_refs.add(claim.ref)
            return "staged"
        return await self._done_now(claim, row, outcome, done_at)

    async def _done_now(self, claim: Claim, row: EffectRow, outcome: str, done_at: float) -> Outcome:
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

    def done_many(
        self, claims: Sequence[Claim], labels: Sequence[str], result: list[Outcome] | None = None,
    ) -> list[Outcome]:
        """The effects of several claimed rows happened (``labels[i]`` for ``claims[i]``): each
        mark is staged for the batch's next flush, which writes them in one fenced bulk write
        ("staged", written into ``result`` too). Only inside ``batching()``, where the worker
        runs every batch: a batch unit's marks have no other way to the store."""
        if self._staged is None:
            raise RuntimeError("done_many stages marks for a flush: call it inside batching()")
        done_at = self.clock.now()
        for c, label in zip(claims, labels, strict=True):
            assert c.row is not None  # the batch unit only holds decoded rows
            self._staged.append(Staged(c, c.row, label, done_at))
            self._staged_refs.add(c.ref)
        out: list[Outcome] = ["staged"] * len(claims)
        if result is not None:
            result[:] = out
        return out

    async def _ride_out(
        self, write: Callable[[], Awaitable[R]], lease_until: Callable[[], float], lost: str,
        ctx: dict[str, object],
    ) -> R | None:
        """Run a done write, riding out a store outage for as long as the lease lasts (a lost
        done mark means the row runs again after its lease -- ADR-094's second residual window --
        so giving up early only makes that double certain; a mark written after the lease ended
        could land on a row another replica runs now, so it stops there). None: not recorded."""
        attempt = 0
        while True:
            try:
                return await write()
            except StoreUnavailable as exc:
                delay = MARK_DONE_BACKOFF[min(attempt, len(MARK_DONE_BACKOFF) - 1)]
                attempt += 1
                if self.clock.now() + delay >= lease_until():
                    log.error(lost, exc, extra=ctx)
                    return None
                await self.pause(delay)

    def _count_done(self, row: EffectRow, outcome: str, done_at: float) -> None:
        if self.metrics is not None:
            self.metrics.row_done(row, done_at)
        if self.on_done is not None:
            self.on_done(row, outcome)


def _ctx(row: EffectRow) -> dict[str, object]:
    return {"tenant_id": row.tenant_id, "seq": row.seq, "row_key": row.row_key}
