"""What holds one effect row now, by name (issue 33, item 4): an ordered list of checks.

Each check looks at the row (and, when it must, at the store: the limits' holders, the live
replicas, the tenant's due rows) and returns the holds it finds; ``explain`` runs every check in
``CHECKS`` order and lists what they return. A new reason to wait is one more check in that
list (pause and coalescing, issue 33 items 1 and 2, go where the comments in ``CHECKS`` say).

Every store read here is bounded and indexed: one read of the key's slots (at most the limit),
one counter by id, the membership leases (one small document per replica), one count stopped
at ``TURN_LIMIT`` over the pending rows of one tenant.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec

from board_outbox.engine.limits import LimitSettings
from board_outbox.engine.membership import MembershipSettings, owner, trusted
from board_outbox.engine.worksettings import WorkerSettings
from board_outbox.model.domain import (
    CLAIMED,
    COALESCED,
    DONE,
    FAILED,
    LAUNCH,
    PENDING,
    EffectRow,
    Subscription,
)
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
    Turn,
)
from board_outbox.model.limits import bot_key, parse_waiting, rate_slot, rate_window, tenant_key
from board_outbox.ports import Stores

# the tenant's due rows counted ahead of a row, at most (one count stopped there)
TURN_LIMIT = 1000


class ExplainSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The settings a row's wait depends on: the configuration's own sections."""

    worker: WorkerSettings = WorkerSettings()
    limits: LimitSettings = LimitSettings()
    membership: MembershipSettings = MembershipSettings()


_NOT_READ = object()


@dataclass
class Case:
    """One row being explained: what every check may read, and the notes they leave."""

    row: EffectRow
    now: float
    stores: Stores
    settings: ExplainSettings
    notes: list[str] = field(default_factory=list)
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


# pause (issue 33 item 1) goes here: a paused tenant, subscription or bot holds a pending row
# before any limit is tried (the row waits without spending an attempt, like a deferral)


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
    if r.state != PENDING or r.kind != LAUNCH:
        return []
    waited = parse_waiting(r.waiting) if r.waiting else None
    if r.waiting and waited is None:
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
    """Issue 33: superseded by a newer row of its (subscription, card)."""
    r = c.row
    if r.state != COALESCED:
        return []
    at = r.done_at.timestamp() if r.done_at is not None else None
    return [Coalesced(summary=(f"coalesced into {r.coalesced_into}: that newer row of the same "
                               "(subscription, card) ran instead"), into=r.coalesced_into, at=at)]


async def coalescing(c: Case) -> list[Hold]:
    """Issue 33: a coalescing row in its card's quiet window (not yet due, never failed)."""
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
    # pause: here (before the limits: a paused row tries none)
    limits,
    backoff,
    coalescing,
    ownership,
    turn,
)
