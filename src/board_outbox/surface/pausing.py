"""The operator's pause and resume (F3), shared by the command line (``pause``,
``resume``, ``paused``) and the console: each checks its input, writes one pause document
(``PauseStore``: the action, who and when appended to the document's audit) and logs one line.
The replicas do the rest within one heartbeat (``engine/flow/pause.PauseGate``)."""

from __future__ import annotations

import logging

from board_outbox.model.errors import MalformedDocument, SubscriptionNotFound, UsageError
from board_outbox.model.pause import MAX_BY, MAX_REASON, Pause, key_problem, text_problem
from board_outbox.ports import PauseStore, Stores
from board_outbox.service.health import all_tenants

__all__ = ["check_pause", "pause", "pauses_on", "resume"]

log = logging.getLogger("board_outbox.admin")


def _store(stores: Stores) -> PauseStore:
    if stores.pauses is None:
        raise UsageError("this backend keeps no pauses")
    return stores.pauses


def check_pause(scope: str, key: str, *, reason: str = "", by: str = "") -> None:
    """A ``UsageError`` (one line, exit 2) when the pause cannot be written as given."""
    for problem in (key_problem(scope, key), text_problem("--reason", reason, MAX_REASON),
                    text_problem("--by", by, MAX_BY)):
        if problem is not None:
            raise UsageError(problem)


async def unknown(stores: Stores, scope: str, key: str) -> str | None:
    """Why the store knows no such tenant or subscription (a typo?); None: it knows it, or the
    scope is a bot (no store lists bots: any name is taken)."""
    if scope == "tenant" and key not in await all_tenants(stores):
        return (f"unknown tenant {key!r}: no events, subscriptions or live rows "
                "(`board-outbox status` lists the tenants)")
    if scope == "subscription":
        try:
            await stores.subs.get(key)
        except SubscriptionNotFound:
            return f"unknown subscription {key!r}"
        except MalformedDocument:
            return None  # it exists; its rows are what a pause would hold
    return None


async def pause(stores: Stores, scope: str, key: str, *, reason: str, by: str,
                now: float) -> bool:
    """Pause (``scope``, ``key``); True when it was not paused before (False: it was, and its
    reason is now ``reason``). Audited in the pause document."""
    check_pause(scope, key, reason=reason, by=by)
    new = await _store(stores).pause(scope, key, reason=reason, by=by, at=now)
    log.info("%s %s %s by %s: %s", "paused" if new else "pause updated:", scope, key, by,
             reason or "(no reason given)",
             extra={"pause": f"{scope}:{key}", "by": by, "action": "pause"})
    return new


async def resume(stores: Stores, scope: str, key: str, *, by: str, now: float) -> bool:
    """Lift the pause of (``scope``, ``key``); False when it was not paused. Audited."""
    check_pause(scope, key, by=by)
    lifted = await _store(stores).resume(scope, key, by=by, at=now)
    if lifted:
        log.info("resumed %s %s by %s", scope, key, by,
                 extra={"pause": f"{scope}:{key}", "by": by, "action": "resume"})
    return lifted


async def pauses_on(stores: Stores) -> list[Pause]:
    """The pauses that are on, by scope and key (a bad pause document is left out and reported
    once: ``BAD_DOCUMENTS``)."""
    return sorted((p for p in await _store(stores).all() if p.active),
                  key=lambda p: (p.scope, p.key))
