"""Claiming (a part of ``EffectWorker``, ``engine/work/worker.py``): which rows a tick takes and
how many -- the hand-off's rows first, the expired leases' reclaim, the fair pick across tenants
(S2, F1) -- the claim size that follows the backlog and the measured pace, and the sweep that
parks the rows no claim can ever pick (R2). Apart from executing: this decides what runs;
``executing`` runs one row and chooses its outcome.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection

from board_outbox.engine.flow.pressure import Pressure
from board_outbox.engine.work.handoff import by_priority
from board_outbox.engine.work.outcomes import TickResult
from board_outbox.engine.work.running import Batch, BatchRunning
from board_outbox.model.bad_documents import OnceLog, cap
from board_outbox.model.errors import BrokenRow, StoreError, StoreUnavailable
from board_outbox.model.row_documents import stuck_reason
from board_outbox.ports import Claim, EffectOutbox

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


class Claiming(BatchRunning):
    """The claiming part of ``EffectWorker``: the attributes below are the worker's own."""

    outbox: EffectOutbox
    pressure: Pressure | None
    prefer: Callable[[], Collection[str] | None]
    stream_open: Callable[[], bool]
    _once: OnceLog
    _next_sweep: float
    _next_reclaim: float
    _row_seconds: float
    _want: int

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


def _doc_ctx(ref: object, doc: dict[str, object]) -> dict[str, object]:
    return {"tenant_id": cap(doc.get("tenant_id"), 200), "row_key": cap(doc.get("row_key"), 200),
            "row_ref": str(ref)}
