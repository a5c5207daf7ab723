"""The launch limits a pending launch is over (F2): the one its last deferral named, and any
other it is over now, with the slots' holders and the rate window's count."""

from __future__ import annotations

import msgspec

from board_outbox.engine.flow.limits import LimitSettings
from board_outbox.engine.upkeep.holds.case import Case, from_now
from board_outbox.model.explanation import Hold, Limit
from board_outbox.model.ids import LAUNCH
from board_outbox.model.limits import bot_key, parse_waiting, rate_slot, rate_window, tenant_key
from board_outbox.model.pause import paused_by
from board_outbox.model.rows import PENDING
from board_outbox.model.subscriptions import Subscription


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
        tail = (f"; due again {from_now(until - c.now)}" if until is not None and until > c.now
                else "; due now: the next claim tries again")
        if was and not full:
            tail += " (no longer full: it should pass)"
        elif not was:
            tail += " (full now: its next claim is deferred on it)"
        out.append(Limit(summary=head + tail, scope=k.scope, kind=k.kind, key=k.key,
                         limit=k.limit or None, used=used, full=full, holders=holders,
                         until=until))
    return out
