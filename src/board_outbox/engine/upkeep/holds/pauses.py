"""The pauses that hold a row (F3): the one its ``waiting`` names, and every pause on now over
its tenant, subscription or bot; a lifted one still holding it until the release sweep."""

from __future__ import annotations

from board_outbox.engine.flow.pause import RELEASE_SWEEP_SECONDS
from board_outbox.engine.upkeep.holds.case import Case, from_now
from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.explanation import Hold, Paused
from board_outbox.model.ids import LAUNCH
from board_outbox.model.pause import (
    HELD_OFFSET,
    PAUSES_COLLECTION,
    Pause,
    is_held,
    pause_id,
    paused_by,
)
from board_outbox.model.rows import PENDING
from board_outbox.model.times import when


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
    who = f"since {when(p.since)} ({from_now(p.since - c.now)}) by {p.by or 'someone'}" + (
        f": {p.reason}" if p.reason else "")
    resume = f"`board-outbox resume --{p.scope} {p.key}`"
    if holding:
        what = (f"held by the pause of {p.scope} {p.key}, {who}; it waits without spending an "
                f"attempt and runs in its order once the pause is lifted ({resume})"
                + (f", due again at its own time ({from_now(due - c.now)})" if due is not None else ""))
    else:
        what = (f"{p.scope} {p.key} is paused, {who}: the next claim holds it (no attempt "
                f"spent) until the pause is lifted ({resume})")
    return Paused(summary=what, scope=p.scope, key=p.key, active=True, since=p.since,
                  by=p.by, reason=p.reason, held=holding, due=due)


def _lifted(c: Case, scope: str, key: str, p: Pause | None, due: float | None) -> Paused:
    lift = p.lifted if p is not None else None
    if lift is not None:
        when_lifted = f" (resumed {from_now(lift.at - c.now)} by {lift.by or 'someone'})"
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
            + (f" ({from_now(due - c.now)})" if due is not None else ""))
    return Paused(summary=what, scope=scope, key=key, active=False, since=None,
                  by=lift.by if lift is not None else "", held=True, due=due)
