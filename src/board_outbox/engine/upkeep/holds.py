"""What holds one effect row now, by name (what ``explain`` lists): an ordered list of checks.

Each check looks at the row (and, when it must, at the store: the limits' holders, the live
replicas, the tenant's due rows) and returns the holds it finds; ``explain`` runs every check in
``CHECKS`` order and lists what they return. A new reason to wait is one more check in that
list.

Every store read here is bounded and indexed: one read of the key's slots (at most the limit),
one counter by id, the membership leases (one small document per replica), the pause documents
(one small read, as every replica reads them each heartbeat), one count stopped at
``TURN_LIMIT`` over the pending rows of one tenant.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec

from board_outbox.engine.flow.limits import LimitSettings
from board_outbox.engine.flow.membership import MembershipSettings, owner, trusted
from board_outbox.engine.flow.pause import RELEASE_SWEEP_SECONDS
from board_outbox.engine.work.worksettings import WorkerSettings
from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.errors import MalformedDocument, SubscriptionNotFound
from board_outbox.model.explanation import (
    Backoff,
    Coalesced,
    Coalescing,
    DeadLettered,
    Done,
    ExpiredLease,
    Hold,
    Lease,
    Limit,
    NotDue,
    Ownership,
    Paused,
    Turn,
)
from board_outbox.model.ids import LAUNCH
from board_outbox.model.limits import bot_key, parse_waiting, rate_slot, rate_window, tenant_key
from board_outbox.model.pause import (
    HELD_OFFSET,
    PAUSES_COLLECTION,
    Pause,
    is_held,
    pause_id,
    paused_by,
)
from board_outbox.model.retention import Retention, days
from board_outbox.model.rows import CLAIMED, COALESCED, DONE, FAILED, LIVE_STATES, PENDING, EffectRow
from board_outbox.model.subscriptions import Subscription
from board_outbox.model.times import when
from board_outbox.ports import Stores

# the tenant's due rows counted ahead of a row, at most (one count stopped there)
TURN_LIMIT = 1000


class ExplainSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The settings a row's wait depends on: the configuration's own sections."""

    worker: WorkerSettings = WorkerSettings()
    limits: LimitSettings = LimitSettings()
    membership: MembershipSettings = MembershipSettings()
    retention: Retention = Retention()  # how long a settled row is kept before it is gone (O8)


_NOT_READ = object()


@dataclass
class Case:
    """One row being explained: what every check may read, and the notes they leave."""

    row: EffectRow
    now: float
    stores: Stores
    settings: ExplainSettings
    notes: list[str] = field(default_factory=list)
    paused: bool = False  # a pause holds it: it tries no limit (``paused``)
    _sub: object = _NOT_READ

    async def subscription(self) -> Subscription | None:
        """The row's subscription as it is now, read once (None: gone, or unreadable: a note
        says which)."""
        if self._sub is _NOT_READ:
            self._sub = None
            if self.row.sub_id is not None:
                try:
                    self._sub = await self.stores.subs.get(self.row.sub_id)
                except SubscriptionNotFound:
                    self.notes.append(f"subscription {self.row.sub_id!r} is deleted: the row is "
                                      "dropped (done, not run) when it is claimed")
                except MalformedDocument as exc:
                    self.notes.append(f"its subscription does not decode ({exc}): the row is "
                                      "dead-lettered when it is claimed")
        return self._sub if isinstance(self._sub, Subscription) else None


HoldCheck = Callable[[Case], Awaitable[list[Hold]]]


def _in(seconds: float) -> str:
    return f"in {seconds:.1f}s" if seconds >= 0 else f"{-seconds:.1f}s ago"


def _last_error(row: EffectRow) -> str | None:
    return row.errors[-1].error if row.errors else None


# --- the checks, in CHECKS order --------------------------------------------------------------


async def done(c: Case) -> list[Hold]:
    r = c.row
    if r.state != DONE:
        return []
    at = r.done_at.timestamp() if r.done_at is not None else None
    return [Done(summary=f"done: {r.outcome or 'no outcome recorded'}", done_at=at,
                 outcome=r.outcome)]


async def dead_lettered(c: Case) -> list[Hold]:
    r = c.row
    if r.state != FAILED:
        return []
    err = _last_error(r)
    return [DeadLettered(
        summary=(f"dead-lettered after {r.attempts} attempt(s): {err or 'no error recorded'}; "
                 "it waits for a replay"),
        attempts=r.attempts, error=err,
        replay=f"board-outbox dead-letters replay {r.row_key}")]


async def lease(c: Case) -> list[Hold]:
    r = c.row
    if r.state != CLAIMED:
        return []
    attempt = r.attempts + 1
    budget = c.settings.worker.max_attempts
    if r.lease_until is not None and r.lease_until > c.now:
        return [Lease(summary=(f"claimed: attempt {attempt} of {budget} under claim "
                               f"{r.claim_id}, in a worker's hands (running, or queued in its "
                               f"batch or hand-off); lease ends {_in(r.lease_until - c.now)}"),
                      claim_id=r.claim_id, attempt=attempt, until=r.lease_until)]
    every = c.settings.worker.reclaim_every_seconds
    if r.lease_until is None:
        what = "claimed with no lease recorded: the stuck-row sweep parks it"
    else:
        what = (f"lease of claim {r.claim_id} expired {_in(r.lease_until - c.now)}: stealable; "
                f"the next expired-lease sweep (every {every:g}s on each replica) reclaims it "
                f"and counts the lost attempt")
        if attempt >= budget:
            what += f" -- that was attempt {attempt} of {budget}: it is dead-lettered then"
    return [ExpiredLease(summary=what, claim_id=r.claim_id, attempt=attempt,
                         expired_at=r.lease_until)]


async def paused(c: Case) -> list[Hold]:
    """F3: the pauses that hold a pending subscription row -- the one its ``waiting`` names when
    it is held, and every pause on now over its tenant, its subscription or (a launch) its bot
    -- as the worker and the launch handler check them. Projection rows are never held."""
    r = c.row
    if r.state != PENDING or r.sub_id is None:
        return []
    named = paused_by(r.waiting)
    held = named is not None and is_held(r.not_before)
    store = c.stores.pauses
    if store is None:
        if held:
            c.notes.append("this backend keeps no pauses: which pause held it cannot be read")
        return []
    pauses: dict[tuple[str, str], Pause] = {(p.scope, p.key): p for p in await store.all()}
    wanted: list[tuple[str, str]] = [named] if named is not None else []
    wanted += [("tenant", r.tenant_id), ("subscription", r.sub_id)]
    if r.kind == LAUNCH and (sub := await c.subscription()) is not None:
        wanted.append(("bot", sub.bot))  # the launch handler's check: only a launch has a bot
    due = r.not_before - HELD_OFFSET if held else None
    out: list[Hold] = []
    for scope, key in dict.fromkeys(wanted):
        p = pauses.get((scope, key))
        holding = held and named == (scope, key)
        if p is not None and p.active:
            out.append(_on(c, p, holding, due))
        elif holding:
            out.append(_lifted(c, scope, key, p, due))
    c.paused = any(isinstance(h, Paused) and h.active for h in out)
    return out


def _on(c: Case, p: Pause, holding: bool, due: float | None) -> Paused:
    who = f"since {when(p.since)} ({_in(p.since - c.now)}) by {p.by or 'someone'}" + (
        f": {p.reason}" if p.reason else "")
    resume = f"`board-outbox resume --{p.scope} {p.key}`"
    if holding:
        what = (f"held by the pause of {p.scope} {p.key}, {who}; it waits without spending an "
                f"attempt and runs in its order once the pause is lifted ({resume})"
                + (f", due again at its own time ({_in(due - c.now)})" if due is not None else ""))
    else:
        what = (f"{p.scope} {p.key} is paused, {who}: the next claim holds it (no attempt "
                f"spent) until the pause is lifted ({resume})")
    return Paused(summary=what, scope=p.scope, key=p.key, active=True, since=p.since,
                  by=p.by, reason=p.reason, held=holding, due=due)


def _lifted(c: Case, scope: str, key: str, p: Pause | None, due: float | None) -> Paused:
    lift = p.lifted if p is not None else None
    if lift is not None:
        when_lifted = f" (resumed {_in(lift.at - c.now)} by {lift.by or 'someone'})"
    elif p is None:
        bad = next((d for d in BAD_DOCUMENTS.current() if d.collection == PAUSES_COLLECTION
                    and d.key == pause_id(scope, key)), None)
        when_lifted = (f" (its pause document does not parse, so it pauses nothing: "
                       f"{bad.problem})" if bad is not None else " (no pause document names it)")
    else:
        when_lifted = ""
    what = (f"held for the pause of {scope} {key}, which is no longer on{when_lifted}: a "
            f"replica's next pause read releases it (within one heartbeat; every "
            f"{RELEASE_SWEEP_SECONDS:g}s at the latest), due again at its own time"
            + (f" ({_in(due - c.now)})" if due is not None else ""))
    return Paused(summary=what, scope=scope, key=key, active=False, since=None,
                  by=lift.by if lift is not None else "", held=True, due=due)


class LimitKey(msgspec.Struct, frozen=True):
    scope: str  # bot | tenant
    kind: str  # in_flight | per_second
    key: str
    limit: float


def launch_limits(tenant_id: str, sub: Subscription, s: LimitSettings) -> list[LimitKey]:
    """The limits a launch of ``sub`` is counted under, as ``LaunchGate.hold`` takes them: the
    subscription's own bot limits, else the configured ones; the tenant's (0: none)."""
    in_flight = sub.max_in_flight if sub.max_in_flight is not None else s.bot_in_flight
    per_second = sub.max_per_second if sub.max_per_second is not None else s.bot_per_second
    out = []
    for scope, key, n, rate in (("bot", bot_key(tenant_id, sub.bot), in_flight, per_second),
                                ("tenant", tenant_key(tenant_id), s.tenant_in_flight,
                                 s.tenant_per_second)):
        if n:
            out.append(LimitKey(scope, "in_flight", key, float(n)))
        if rate:
            out.append(LimitKey(scope, "per_second", key, float(rate)))
    return out


async def limits(c: Case) -> list[Hold]:
    """A pending launch over a limit: the one its last deferral named (``waiting``), and any
    other it is over now (its next claim would be deferred on it)."""
    r = c.row
    if r.state != PENDING or r.kind != LAUNCH or c.paused:  # a paused row tries no limit
        return []
    waited = parse_waiting(r.waiting) if r.waiting else None
    if r.waiting and waited is None and paused_by(r.waiting) is None:
        c.notes.append(f"it was deferred on {r.waiting!r}, which names no limit this version "
                       "knows")
    sub = await c.subscription()
    keys = launch_limits(r.tenant_id, sub, c.settings.limits) if sub is not None else []
    if waited is not None and not any((k.scope, k.kind, k.key) == waited for k in keys):
        keys.insert(0, LimitKey(*waited, 0.0))  # no longer configured: still what it waited on
    if not keys:
        return []
    store = c.stores.limits
    if store is None:
        c.notes.append("this backend keeps no limit store: the limits' use is unknown")
    out: list[Hold] = []
    for k in keys:
        was = waited == (k.scope, k.kind, k.key)
        holders, used, full, until = [], None, False, None
        if k.kind == "in_flight":
            if store is not None:
                holders = await store.holders(k.key, c.now)
                used = len(holders)
                full = bool(k.limit) and used >= k.limit
            use = f"{used if used is not None else '?'} of {k.limit:g} slots held now"
        else:
            if store is not None and k.limit:
                used = await store.counted(k.key, k.limit, c.now)
                window, allowed = rate_window(k.limit)
                full = used is None or used >= allowed
                until = rate_slot(k.key, k.limit, c.now)[2] if full else None
                use = (f"{'?' if used is None else used} of {allowed} launches counted in "
                       f"this {window}s window")
            else:
                use = "use unknown"
        if not (was or full):
            continue
        if r.not_before > c.now:
            until = r.not_before
        limit = f"{k.limit:g}" if k.limit else "no longer configured"
        head = (f"{k.scope} {k.kind.replace('_', '-')} limit of {k.key} ({limit}): {use}")
        tail = (f"; due again {_in(until - c.now)}" if until is not None and until > c.now
                else "; due now: the next claim tries again")
        if was and not full:
            tail += " (no longer full: it should pass)"
        elif not was:
            tail += " (full now: its next claim is deferred on it)"
        out.append(Limit(summary=head + tail, scope=k.scope, kind=k.kind, key=k.key,
                         limit=k.limit or None, used=used, full=full, holders=holders,
                         until=until))
    return out


async def backoff(c: Case) -> list[Hold]:
    r = c.row
    if r.state != PENDING or r.not_before <= c.now or r.waiting:
        return []
    if not r.errors and not r.attempts:
        if r.burst_at is not None:
            return []  # its quiet window: ``coalescing`` says so
        return [NotDue(summary=f"not due until {_in(r.not_before - c.now)} (no error recorded: "
                               "not a retry)", until=r.not_before)]
    err = _last_error(r)
    return [Backoff(summary=(f"backing off after attempt {r.attempts} of "
                             f"{c.settings.worker.max_attempts}: due again "
                             f"{_in(r.not_before - c.now)}; last error: {err or 'none recorded'}"),
                    until=r.not_before, after_attempt=r.attempts, error=err)]


async def coalesced(c: Case) -> list[Hold]:
    """Superseded by a newer row of its (subscription, card); that row may have been superseded
    in turn (edits a little apart: 1 and 2 into 7, 7 into 8), so the chain of
    ``coalesced_into`` is followed, one read a row, to the row that runs for them all --
    at most ``CHAIN_LIMIT`` rows, and a loop, a row gone or one that does not decode is said,
    never followed."""
    r = c.row
    if r.state != COALESCED:
        return []
    at = r.done_at.timestamp() if r.done_at is not None else None
    if r.coalesced_into is None:
        return [Coalesced(summary="coalesced, but the row names no row that covers it",
                          into=None, at=at, problem="no coalesced_into")]
    chain, end, problem = await _chain(c, r.coalesced_into)
    head = f"coalesced into {r.coalesced_into}" + (
        f", itself superseded: {' -> '.join(chain[1:])}" if len(chain) > 1 else "")
    last = chain[-1]
    if problem is not None:
        tail = problem
    elif end is None:  # unreachable: a chain without a problem ends at a row read
        tail = "its end was not read"
    elif end.state == DONE:
        tail = (f"{last} ran instead ({end.outcome or 'no outcome recorded'})" if len(chain) > 1
                else f"that newer row of the same (subscription, card) ran instead "
                     f"({end.outcome or 'no outcome recorded'})")
    elif end.state in LIVE_STATES:
        tail = f"{last}, the newest of its card's burst, has not run yet ({end.state}): it runs for them all"
    elif end.state == FAILED:
        tail = (f"{last} was dead-lettered: none of them has run (`board-outbox dead-letters "
                f"replay {last}` runs it for them all)")
    else:
        tail = f"{last} is {end.state}"
    return [Coalesced(summary=f"{head}: {tail}", into=r.coalesced_into, at=at, chain=chain,
                      end_state=None if end is None else end.state,
                      ran=last if end is not None and end.state == DONE and problem is None
                      else None, problem=problem)]


# rows of a coalescing chain followed at most (a burst's rows are spread over its window at
# most; a longer chain is a loop or a planted one)
CHAIN_LIMIT = 32


async def _chain(c: Case, first: str) -> tuple[list[str], EffectRow | None, str | None]:
    """The chain from ``first`` to its end: (keys, the last row read, why it stopped early)."""
    chain = [first]
    seen = {c.row.row_key}
    key = first
    while True:
        if key in seen:
            return chain, None, (f"the chain loops back to {key}: a planted or broken document; "
                                 "none of it can be said to have run")
        seen.add(key)
        try:
            row = await c.stores.outbox.get(key)
        except MalformedDocument as exc:
            return chain, None, f"{key} does not decode ({exc.detail}): the chain stops there"
        if row is None:
            kept = c.settings.retention
            return chain, None, (f"{key} is gone (a done row is deleted "
                                 f"{days(kept.done_seconds)}, a coalesced one "
                                 f"{days(kept.coalesced_seconds)}, once settled): the chain "
                                 "stops there")
        if row.state != COALESCED or row.coalesced_into is None:
            return chain, row, None
        if len(chain) >= CHAIN_LIMIT:
            return chain, row, f"the chain is longer than {CHAIN_LIMIT} rows: followed that far"
        key = row.coalesced_into
        chain.append(key)


async def coalescing(c: Case) -> list[Hold]:
    """A coalescing row in its card's quiet window (not yet due, never failed)."""
    r = c.row
    if (r.state != PENDING or r.burst_at is None or r.not_before <= c.now or r.errors
            or r.attempts or r.waiting):
        return []
    return [Coalescing(summary=(f"coalescing: its card's quiet window ends {_in(r.not_before - c.now)}"
                                f"; it launches then unless a newer row of its (subscription, card) "
                                f"supersedes it (its burst began {_in(r.burst_at - c.now)})"),
                       until=r.not_before, burst_at=r.burst_at)]


async def ownership(c: Case) -> list[Hold]:
    """Who claims the due row: the live owner of its tenant first (S1)."""
    r, ms = c.row, c.settings.membership
    if r.state != PENDING or r.not_before > c.now:
        return []
    members = c.stores.members
    if members is None or not ms.enabled:
        c.notes.append("membership is off: any replica claims any tenant's rows")
        return []
    live = [m.member_id for m in trusted(await members.live(c.now), c.now, ms)]
    if not live:
        return [Ownership(summary="no replica is alive (no live lease in the membership "
                                  "store): nothing claims it until one runs",
                          owner=None, replicas=0)]
    who = owner(live, r.tenant_id)
    if len(live) == 1:
        return [Ownership(summary=f"tenant {r.tenant_id} is owned by {who}, the only live "
                                  "replica", owner=who, replicas=1)]
    steal_at = r.created_at + c.settings.worker.steal_after_seconds
    if steal_at > c.now:
        text = (f"only its owner claims it until {_in(steal_at - c.now)}, then any replica")
    else:
        text = "materialized long enough ago that any replica may take it"
    return [Ownership(summary=f"tenant {r.tenant_id} is owned by {who} (of {len(live)} live "
                              f"replicas): {text}", owner=who, replicas=len(live),
                      steal_at=steal_at)]


async def turn(c: Case) -> list[Hold]:
    """Due: its place among the tenant's due rows (claims take each tenant's oldest due first)."""
    r = c.row
    if r.state != PENDING or r.not_before > c.now:
        return []
    ahead = await c.stores.outbox.due_ahead(r.tenant_id, r.not_before, r.seq, TURN_LIMIT)
    capped = ahead >= TURN_LIMIT
    where = ("first in line: the next claim of its tenant takes it" if not ahead else
             f"{'at least ' if capped else ''}{ahead} of its tenant's due rows are ahead of it")
    return [Turn(summary=f"due {_in(r.not_before - c.now)}; {where}", due_since=r.not_before,
                 ahead=ahead, ahead_at_least=capped)]


CHECKS: tuple[HoldCheck, ...] = (
    done,
    coalesced,
    dead_lettered,
    lease,
    paused,  # before the limits: a paused row tries none
    limits,
    backoff,
    coalescing,
    ownership,
    turn,
)
