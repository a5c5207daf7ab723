"""The leases a worker holds (O4): one ``Lease`` per claimed row, as the heartbeat has extended
it, and the beat that extends them.

While a claimed row waits its turn in its batch or runs, its lease is in ``Leases.inflight``; the
handed rows that wait in the hand-off hold theirs there (``handoff.py``). Every beat pushes each lease
``lease_seconds`` out, never past ``max_execution_seconds`` after its attempt started, in one
fenced write per (claim_id, new lease end): a lease that was stolen is left alone (M8), and a
hung effect loses its lease so that the reclaim counts the attempt (M9). What else a running
effect holds rides on its lease's beats (``Lease.riders``: a launch's in-flight slots, F2): each
beat runs them while the lease holds, and they stop with it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

import msgspec

from board_outbox.model import transitions as T
from board_outbox.model.clock import Clock
from board_outbox.model.errors import StoreError, StoreUnavailable
from board_outbox.ports import Claim, EffectOutbox

__all__ = ["BEAT_CHUNK", "Lease", "Leases", "Rider", "current"]

log = logging.getLogger("board_outbox.worker")

# The leases one write of a beat extends at most: a write's server time grows with its rows
# (a beat over 703 leases timed out at the 10 s op timeout on the wire test server), so a beat
# goes out in writes of this many, nearest lease end first, each answered well inside the op
# timeout; the first that times out ends the beat (the next one tries again).
BEAT_CHUNK = 100

# something a running effect holds besides its row, renewed by each beat of the row's lease
# (it handles its own store errors)
Rider = Callable[[], Awaitable[None]]


class Lease:
    """The lease of one claim in flight, as the heartbeat has extended it."""

    def __init__(self, claim: Claim, started: float) -> None:
        self.claim, self.started, self.until = claim, started, claim.lease_until
        self.stopped = ""  # why the heartbeat stopped: "" | lost | max_execution
        # run at each beat while the lease holds (after its write; not once it has stopped)
        self.riders: list[Rider] = []


def current(lease: Lease) -> Claim:
    """The claim with its lease as the heartbeat has extended it."""
    c = lease.claim
    return c if lease.until == c.lease_until else msgspec.structs.replace(c, lease_until=lease.until)


class Leases:
    """The leases of the rows in flight (``inflight``), and the heartbeat's beat over any lease
    the worker holds (``extend_many``). ``outbox`` is the worker's: a test or the harness may
    swap it, and the next beat writes through the new one."""

    def __init__(self, *, outbox: EffectOutbox, clock: Clock, lease_seconds: float,
                 max_execution_seconds: float) -> None:
        self.outbox = outbox
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.max_execution_seconds = max_execution_seconds
        self.inflight: dict[Any, Lease] = {}  # row ref -> lease, while its row executes
        # told when a beat's write times out (the worker's backpressure)
        self.on_unavailable: Callable[[str], None] = lambda why: None

    def start(self, claim: Claim, now: float) -> Lease:
        """The claim's attempt starts at ``now``: its lease is in ``inflight`` (a new one, unless
        it is held under this claim since the batch was claimed)."""
        lease = self.inflight.get(claim.ref)
        if lease is None or lease.claim.claim_id != claim.claim_id:
            lease = self.inflight[claim.ref] = Lease(claim, now)
        else:  # held since the batch was claimed: its attempt starts now
            lease.started = now
        return lease

    def current_claim(self, claim: Claim) -> Claim:
        """The claim with its lease as the heartbeat has extended it while it waited."""
        lease = self.inflight.get(claim.ref)
        if lease is None or lease.claim.claim_id != claim.claim_id:
            return claim
        return current(lease)

    def settled(self, refs: Sequence[Any]) -> None:
        """A flush settled these rows' marks: they leave ``inflight`` (the heartbeat kept their
        leases until then, so a mark riding out a slow store does not lose its lease)."""
        for ref in refs:
            self.inflight.pop(ref, None)

    def lease_until(self, claim: Claim) -> float:
        """The end of the claim's lease, as the heartbeat has extended it while in flight."""
        lease = self.inflight.get(claim.ref)
        return claim.lease_until if lease is None else lease.until

    async def extend(self, lease: Lease) -> bool:
        """One heartbeat of one lease (``extend_many``). False: its heartbeat stops (the lease
        was stolen, or the effect ran too long)."""
        await self.extend_many([lease])
        return not lease.stopped

    def _next_until(self, lease: Lease, now: float) -> float | None:
        """How far this beat pushes the lease: ``lease_seconds`` out, never past
        ``max_execution_seconds`` after the attempt started. None: at the cap, it stops."""
        cap = lease.started + self.max_execution_seconds
        if now >= cap:
            lease.stopped = "max_execution"
            log.warning("effect still running after max_execution_seconds (%gs): its lease is no "
                        "longer extended; the reclaim counts the attempt", self.max_execution_seconds,
                        extra={"row_ref": str(lease.claim.ref)})
            return None
        return min(now + self.lease_seconds, cap)

    async def extend_many(self, leases: Collection[Lease]) -> None:
        """One beat over these leases: one fenced write per (claim_id, new lease end) -- the rows
        of one claim started within the same cap share it -- each a no-op on a row whose lease
        was stolen. A lease whose heartbeat stopped (``Lease.stopped``) is left alone. Then the
        riders of every lease still held: a beat whose write failed runs them too (what they
        renew has its own end), a lease lost or at its cap does not."""
        await self._extend(leases)
        for lease in leases:
            if not lease.stopped:
                for ride in list(lease.riders):
                    await ride()

    async def _extend(self, leases: Collection[Lease]) -> None:
        now = self.clock.now()
        groups: dict[tuple[str, float], list[Lease]] = {}
        for lease in leases:
            if lease.stopped:
                continue
            until = self._next_until(lease, now)
            if until is not None and until > lease.until:
                groups.setdefault((lease.claim.claim_id, until), []).append(lease)
        # the leases closest to their end first: a beat cut short by a store timeout has
        # extended those
        order = sorted(groups.items(), key=lambda kv: min(x.until for x in kv[1]))
        left = sum(len(g) for g in groups.values())
        for (claim_id, until), group in order:
            t = T.extend_lease(now=now, lease_until=until)
            group.sort(key=lambda x: x.until)
            for at in range(0, len(group), BEAT_CHUNK):
                part = group[at:at + BEAT_CHUNK]
                try:
                    moved = await self._write(part, claim_id, t)
                except StoreUnavailable as exc:
                    # the store did not answer in time: the rest waits for the next beat (a
                    # beat that waited out one op timeout per group or chunk would hold its
                    # caller -- a tick between batches -- for as many)
                    log.warning("could not extend %d lease(s) (%s): the next beat tries again",
                                left, exc, extra={"row_ref": str(part[0].claim.ref)})
                    self.on_unavailable(type(exc).__name__)
                    return
                except StoreError as exc:  # the next beat tries again
                    log.warning("could not extend %d lease(s) (%s)", len(part), exc,
                                extra={"row_ref": str(part[0].claim.ref)})
                    left -= len(part)
                    continue
                left -= len(part)
                self._settle(part, moved, until)

    async def _write(self, part: list[Lease], claim_id: str, t: T.Transition) -> set[Any]:
        if len(part) == 1:
            ref = part[0].claim.ref
            return {ref} if await self.outbox.apply_claimed(ref, claim_id, t) else set()
        return set(await self.outbox.apply_claimed_many([x.claim.ref for x in part], claim_id, t))

    def _settle(self, part: list[Lease], moved: set[Any], until: float) -> None:
        for lease in part:
            if lease.claim.ref in moved:
                lease.until = until
                continue
            lease.stopped = "lost"
            if self.inflight.get(lease.claim.ref) is lease:  # not one that just finished
                log.warning("lease lost while the effect runs: heartbeat stopped, late marks "
                            "are no-ops", extra={"row_ref": str(lease.claim.ref)})
