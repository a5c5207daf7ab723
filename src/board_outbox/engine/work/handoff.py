"""The hand-off (``tail.Handoff``): the rows our tail inserts born claimed for this worker, queued
until a tick runs them.

``HandoffQueue`` holds those rows with their leases (the heartbeat extends them while they
wait), oldest first, counted by tenant; it sizes the room the tail may fill, mints the claim an
insert's rows are born under (``terms``), hands a tick its rows fairly by tenant (``take``), and
keeps the schedules that come with a hand-off: when the worker's own due-row pick runs
(``pick_due``) and when the waiting rows' leases are next extended between batches (``beat``).
The worker (``worker.py``) owns the queue and answers the tail's ``Handoff`` protocol with it.
"""

from __future__ import annotations

import heapq
import uuid
from collections import deque
from collections.abc import Callable, Collection, Iterable
from typing import Any

from board_outbox.engine.flow.leases import Lease, current
from board_outbox.engine.flow.pressure import Pressure
from board_outbox.model.clock import Clock
from board_outbox.model.fairness import prioritized, ranked, round_robin
from board_outbox.model.ids import PROJECTION
from board_outbox.ports import Claim, ClaimTerms

__all__ = ["EXPECTED_MAX", "HANDOFF_BATCHES", "HANDOFF_LEASE_SHARE", "HANDOFF_MAX_BATCHES",
           "PICK_IDLES", "TERMS_SHARE", "TURNS_KEPT", "HandoffQueue", "by_priority", "claim_priority"]

# The hand-off (the rows our tail inserts born claimed for this worker) takes rows as long as
# they start within HANDOFF_LEASE_SHARE of a lease at the measured pace, at least
# HANDOFF_BATCHES claims' worth and at most HANDOFF_MAX_BATCHES claims' worth (counting the
# batch in flight); a tenant with a claim's worth queued waits for it to run (its backlog stays
# in the event log meanwhile). Every row held is a lease: if the store stalls, each is a lease to
# extend, and a hand-off sized by a fast pace (a 2,000-row bound let 703 pile up) turned one
# stall into a beat too big to answer within the op timeout. Ten claims keep the worker fed
# while the tail refills it (a tail pass inserts about a claim per tenant), and their leases are
# two writes of a beat (``leases.BEAT_CHUNK``).
HANDOFF_BATCHES = 4
HANDOFF_LEASE_SHARE = 0.1
HANDOFF_MAX_BATCHES = 10
# a worker fed by a hand-off picks at most every PICK_IDLES * idle_seconds (unless a backlog):
# as often as an idle worker polls at its slowest (the service's idle pause backs off to 4x)
PICK_IDLES = 4
# the inserts of our tail within this share of a lease share one claim_id (``terms``)
TERMS_SHARE = 0.25
# due times of rows given back pending that the pick schedule keeps (``expect``): the earliest
EXPECTED_MAX = 1000
# tenants whose last turn in a take is kept beyond those with rows waiting (``take``)
TURNS_KEPT = 10_000


def claim_priority(claim: Claim) -> int | None:
    """The rank of a claimed row within its tenant's share (``fairness.ranked``): the priority
    its subscription row was materialized with; None for a projection row or a row that does
    not decode (each keeps its place)."""
    row = claim.row
    return None if row is None or row.kind == PROJECTION else row.priority


def by_priority(claims: list[Claim]) -> list[Claim]:
    """A tick's claims (the hand-off's, the expired leases', the pick's) with each tenant's
    subscription rows highest priority first in the places they hold, equal priorities in their
    claimed order, the tenants' turns and the projection rows' places where they were
    (``fairness.prioritized``): the lanes then run each tenant's rows in this order."""
    return prioritized(claims, lambda c: c.tenant_id, claim_priority)


class HandoffQueue:
    """The handed rows waiting their turn, and the hand-off's room, terms and schedules."""

    def __init__(self, *, clock: Clock, batch_size: int, lease_seconds: float,
                 heartbeat_fraction: float, idle_seconds: float, net_seconds: float = 5.0) -> None:
        self.clock = clock
        self.batch_size = batch_size
        self.lease_seconds = lease_seconds
        self.heartbeat_fraction = heartbeat_fraction
        self.idle_seconds = idle_seconds
        # the rows our tail inserted born claimed for us (``receive``), oldest first, with their
        # leases (the heartbeat extends them while they wait); taken before any pick
        self._queued: dict[Any, Lease] = {}
        self._queued_by_tenant: dict[str, int] = {}
        # F1: each tenant's last turn in a take (a count of the rows taken): the tenants' turns
        # rotate from take to take (``take``)
        self._turns: dict[str, int] = {}
        self._served = 0
        self._handing = False  # fed by a tail: the pick runs on its schedule (``pick_due``)
        self._next_pick = -float("inf")
        self._next_net = -float("inf")  # the pick's schedule while the change stream is open
        self.net_seconds = net_seconds
        self._due: list[float] = []  # when rows this worker gave back pending are due (a heap)
        self._pick_full = False  # the last pick filled its claim: a backlog, pick every tick
        self.next_beat = -float("inf")  # the handed rows' leases, extended meanwhile
        self._terms_id: str | None = None  # the claim_id the hand-off's inserts share (``terms``)
        self._terms_until = -float("inf")
        # earlier terms' claim ids, with when the last lease minted under each ends
        self._minted: deque[tuple[str, float]] = deque()

    def capacity(self, row_seconds: float, pressure: Pressure | None) -> int:
        """Rows the worker holds at most, the batch in flight and the hand-off's together: what
        starts within ``HANDOFF_LEASE_SHARE`` of a lease at the measured pace (``row_seconds`` a
        row; 0: not measured yet), at least ``HANDOFF_BATCHES`` claims, at most
        ``HANDOFF_MAX_BATCHES`` claims; scaled by the backpressure."""
        floor = self.batch_size * HANDOFF_BATCHES
        most = self.batch_size * HANDOFF_MAX_BATCHES
        if row_seconds <= 0:
            cap = max(floor, most)
        else:
            pace = int(self.lease_seconds * HANDOFF_LEASE_SHARE / row_seconds)
            cap = max(floor, min(most, pace))
        return cap if pressure is None else pressure.scale(cap, self.batch_size)

    def room(self, tenant_id: str, capacity: int, *, stopping: bool, running: int = 0) -> int:
        """Rows of ``tenant_id`` this worker takes now: none while it holds a claim's worth of
        the tenant's rows (F1: a burst waits in the event log, a quiet tenant's row never waits
        behind it) or while it stops; else what it has room for (``capacity``, less the
        ``running`` rows in flight and the rows queued), at least a claim's worth."""
        if stopping or self._queued_by_tenant.get(tenant_id, 0) >= self.batch_size:
            return 0
        return max(self.batch_size, capacity - running - len(self._queued))

    def terms(self, *, stopping: bool) -> ClaimTerms | None:
        """The claim for the rows of one insert, leased from now (None while stopping). Inserts
        within ``TERMS_SHARE`` of a lease share a claim_id (the fence is per row and per claimant:
        sharing it only lets their done marks and lease beats go out as one write each). The
        claim ids minted within the last lease are adopted: a row an earlier insert of ours
        wrote after we had given up on that insert (a store timeout) comes back with the next
        insert of it, instead of waiting out its lease unrun."""
        if stopping:
            return None
        now = self.clock.now()
        if self._terms_id is None or now >= self._terms_until:
            if self._terms_id is not None:
                self._minted.append((self._terms_id, self._terms_until + self.lease_seconds))
            self._terms_id = uuid.uuid4().hex
            self._terms_until = now + self.lease_seconds * TERMS_SHARE
        while self._minted and self._minted[0][1] <= now:  # every lease under it has ended
            self._minted.popleft()
        return ClaimTerms(claim_id=self._terms_id, lease_until=now + self.lease_seconds,
                          adopt=tuple(cid for cid, _ in self._minted))

    def receive(self, claims: Iterable[Claim]) -> bool:
        """Rows our tail inserted born claimed for us: the next ticks run them (no claim
        statement, no pick), a claim's worth a tick, fairly by tenant. From the first hand-off
        on, the pick runs on its own schedule (``pick_due``). True: a row arrived (one not
        queued already)."""
        self._handing = True
        now = self.clock.now()
        got = False
        for c in claims:
            if c.ref not in self._queued:
                self._queued[c.ref] = Lease(c, now)
                self._queued_by_tenant[c.tenant_id] = self._queued_by_tenant.get(c.tenant_id, 0) + 1
                got = True
        return got

    def __len__(self) -> int:
        """Rows waiting in the hand-off."""
        return len(self._queued)

    @property
    def leases(self) -> list[Lease]:
        """The leases of the handed rows waiting their turn."""
        return list(self._queued.values())

    def dequeue(self, leases: Iterable[Lease]) -> None:
        """These handed rows leave the hand-off (taken by a tick, given back, or lost)."""
        for lease in leases:
            if self._queued.pop(lease.claim.ref, None) is not None:
                t = lease.claim.tenant_id
                left = self._queued_by_tenant.get(t, 0) - 1
                if left > 0:
                    self._queued_by_tenant[t] = left
                else:
                    self._queued_by_tenant.pop(t, None)

    def drain(self) -> list[Claim]:
        """Every handed row leaves the hand-off (``EffectWorker.release_queued`` gives them
        back), each with its lease as the heartbeat left it."""
        leases = list(self._queued.values())
        self.dequeue(leases)
        return [current(x) for x in leases]

    def pick_due(self, now: float, *, stream_open: bool = False) -> bool:
        """Whether this tick runs the due-row pick. Without a hand-off or a change stream, every
        tick. With a hand-off, the rows our own tail inserts come by hand, and the pick is only
        for the rest (retries whose backoff ended, another owner's rows past
        ``steal_after_seconds``, released rows): it runs every ``PICK_IDLES * idle_seconds`` --
        as often as an idle worker polls at its slowest. While the change stream is open, the
        owned tenants' new rows come by hand as soon as they are inserted, so the pick is only
        the net: every ``net_seconds``, and as soon as a row this worker gave back pending is
        due (``expect``: it knows their ``not_before``). Whatever the schedule, every tick while
        the last pick came back full (a backlog)."""
        if self._pick_full or (not self._handing and not stream_open):
            return True
        if self._due and self._due[0] <= now:
            return True
        return now >= (self._next_net if stream_open else self._next_pick)

    def picked(self, now: float, *, full: bool) -> None:
        """A pick ran at ``now``; ``full``: it filled its claim (a backlog: pick every tick)."""
        self._pick_full = full
        self._next_pick = now + PICK_IDLES * self.idle_seconds
        self._next_net = now + self.net_seconds
        while self._due and self._due[0] <= now:
            heapq.heappop(self._due)

    def expect(self, due: float) -> None:
        """A row this worker gave back pending (a retry, a deferral) is due at ``due``: the pick
        runs then, whatever its schedule. At most ``EXPECTED_MAX`` are kept (the earliest: a
        later one is caught by the net)."""
        heapq.heappush(self._due, due)
        if len(self._due) > EXPECTED_MAX:
            self._due = heapq.nsmallest(EXPECTED_MAX, self._due)

    def take(self, room: int, tenants: Collection[str] | None,
             most: Callable[[str], int] | None = None) -> list[Claim]:
        """Up to ``room`` handed rows (of ``tenants`` only, when given; at most ``most(t)`` of
        tenant ``t``'s: a lane holding a claim's worth takes none), fairly (F1): round-robin by
        tenant, each tenant's subscription rows highest priority first and, among equal
        priorities, oldest first (``fairness.ranked``), so a quiet tenant's fresh row is not
        queued behind a noisy tenant's burst. The tenants' turns rotate from take to take: a
        tenant served goes behind the tenants not served since (a take of fewer rows than
        tenants does not start from the same tenant each time; which of its rows a tenant
        runs never moves its turn). Each comes with its lease as the heartbeat left it."""
        if room <= 0 or not self._queued:
            return []
        self.dequeue([x for x in self._queued.values() if x.stopped])  # lost while waiting
        turn = self._turns
        left: dict[str, int] = {}
        eligible = []
        for x in self._rank():
            t = x.claim.tenant_id
            if tenants is not None and t not in tenants:
                continue
            n = left[t] = left[t] - 1 if t in left else (room if most is None else most(t)) - 1
            if n >= 0:
                eligible.append(x)
        eligible.sort(key=lambda x: turn.get(x.claim.tenant_id, -1))  # stable: oldest first
        taken = round_robin(eligible, lambda x: x.claim.tenant_id)[:room]
        for x in taken:
            self._served += 1
            turn[x.claim.tenant_id] = self._served
        if len(turn) > TURNS_KEPT:  # forget the tenants with no row waiting
            self._turns = {t: n for t, n in turn.items() if t in self._queued_by_tenant}
        self.dequeue(taken)
        return [current(x) for x in taken]

    def _rank(self) -> list[Lease]:
        """Each tenant's waiting rows ``fairness.ranked`` into the places (positions in the
        queue, oldest first) its rows hold, and kept so: a row a higher-priority row overtook
        takes the place that row held, so the places left keep the kinds of row they had (a
        tenant's next take is a launch's or a projection row's as it would be at priority 0)."""
        queues: dict[str, list[Lease]] = {}
        for x in self._queued.values():
            queues.setdefault(x.claim.tenant_id, []).append(x)
        ordered = {t: iter(ranked(q, lambda x: claim_priority(x.claim))[0])
                   for t, q in queues.items()}
        order = [next(ordered[x.claim.tenant_id]) for x in self._queued.values()]
        self._queued = {x.claim.ref: x for x in order}
        return order

    def beat_due(self, now: float) -> bool:
        """Whether the waiting rows' leases are due a beat between batches."""
        return bool(self._queued) and now >= self.next_beat

    def beat(self, now: float) -> list[Lease]:
        """The leases a beat between batches extends (none with the heartbeat off), and the
        next such beat scheduled."""
        self.next_beat = now + self.lease_seconds * max(self.heartbeat_fraction, 0.1)
        if self.heartbeat_fraction <= 0:
            return []
        return self.due(now)

    def due(self, now: float) -> list[Lease]:
        """The queued rows whose lease ends within two beats: only those are extended (a row
        that starts before its lease needs a beat -- the queue holds ``HANDOFF_LEASE_SHARE`` of
        a lease -- costs no write; one failed beat is still ridden out)."""
        horizon = now + 2 * self.lease_seconds * max(self.heartbeat_fraction, 0.1)
        return [x for x in self._queued.values() if x.until < horizon]
