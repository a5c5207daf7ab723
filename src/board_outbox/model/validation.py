"""Validation at the boundary (SPEC R1, R2): what a stored document may look like before the core
acts on it, and how the core reports one that does not -- once per distinct problem, with an
error text of bounded size.

Pure: no store access, nothing but the domain types.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeGuard

import msgspec

# re-exported: their home before R7 (the domain types report through them as they decode)
from board_outbox.model.bad_documents import BAD_DOCUMENTS as BAD_DOCUMENTS
from board_outbox.model.bad_documents import MAX_ERROR_CHARS as MAX_ERROR_CHARS
from board_outbox.model.bad_documents import BadDocument as BadDocument
from board_outbox.model.bad_documents import BadDocuments as BadDocuments
from board_outbox.model.bad_documents import OnceLog as OnceLog
from board_outbox.model.bad_documents import cap as cap
from board_outbox.model.bounds import MAX_PRIORITY, MIN_PRIORITY
from board_outbox.model.domain import (
    CLAIMED,
    FAILED,
    LAUNCH,
    PENDING,
    SETTLED_STATES,
    AuditEntry,
    EffectRow,
    ErrorEntry,
    Subscription,
    check_id,
    check_kind,
)
from board_outbox.model.errors import InvalidId
from board_outbox.model.limits import rate_problem
from board_outbox.model.records import ConsoleSession, DoneLatency, ReadModelVersions, RowIdentity
from board_outbox.model.times import due_limit, stamp, time_problem

MAX_SEQ = 2**63 - 1  # the counter is a BSON long
MAX_LABELS = 100  # consume_labels / labels_all entries a subscription may carry
MAX_BOT_CHARS = 200  # a subscription's bot: what a launch names, and what limits and pauses key on
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MAX_CARD_TITLE = 64 * 1024  # characters: rows embed the title, and a row must stay far below 16 MB
MAX_CARD_LABELS = 1000
ROW_STATES = frozenset({PENDING, CLAIMED, *SETTLED_STATES})
LEASE_HORIZON_SECONDS = 86400.0  # a lease ending later than this from now is not a lease


def is_seq(value: object) -> bool:
    """A true int (not bool, float, Decimal128...) in the counter's range. BSON longs decode as
    ``bson.Int64``, an int subclass: those are ints."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEQ


def tenant_problem(tenant_id: object) -> str | None:
    """Why ``tenant_id`` cannot be drained (None: it can). A tenant id ends up in card and row
    keys split on "/": one that carries the separator would read another tenant's keys."""
    if not isinstance(tenant_id, str):
        return f"tenant id {tenant_id!r} is not a string"
    try:
        check_id("tenant_id", tenant_id)
    except InvalidId as exc:
        return str(exc)
    return None


def bot_problem(bot: str) -> str | None:
    """Why ``bot`` cannot be a subscription's bot (None: it can): 1-200 characters, no control
    character, no leading or trailing whitespace. A launch names it, and limits and pauses key
    on it: an empty one launches at nobody, one with a newline cannot be typed to pause it."""
    if not bot or len(bot) > MAX_BOT_CHARS or _CONTROL.search(bot) or bot != bot.strip():
        return (f"invalid bot {cap(repr(bot), 100)}: use 1-{MAX_BOT_CHARS} characters, without "
                "control characters or leading or trailing whitespace")
    return None


def subscription_problem(sub: Subscription) -> str | None:
    """Why a decoded subscription must not be used (None: it may). Its id must be an id (it is
    part of its rows' keys), its bot a name (``bot_problem``). Its label lists are bounded:
    a 10,000-label consume is a pathological write that would pause the whole store. Its effect
    kind must be an id, and not ``projection``. Its priority is a whole number from
    ``MIN_PRIORITY`` to ``MAX_PRIORITY`` (a decoded document is held to that by its type; a
    subscription built in memory is checked here)."""
    if (problem := priority_problem(sub.priority)) is not None:
        return problem
    try:
        # its id is part of every row key it owes: one that is not an id (a slash, a newline)
        # makes keys that no command can address (``parse_row_key`` refuses them)
        check_id("sub_id", sub.sub_id)
        check_kind(sub.kind)
    except InvalidId as exc:
        return str(exc)
    if (problem := bot_problem(sub.bot)) is not None:
        return problem
    for name, labels in (("consume_labels", sub.consume_labels),
                         ("rule.labels_all", sub.rule.labels_all)):
        if len(labels) > MAX_LABELS:
            return f"{name} has {len(labels)} entries (at most {MAX_LABELS})"
    if sub.max_per_second is not None and (problem := rate_problem(sub.max_per_second)):
        return f"max_per_second: {problem}"
    if sub.coalesce is not None and sub.kind != LAUNCH:
        return f"coalesce applies to launch subscriptions only (this one is of kind {sub.kind!r})"
    return None


def priority_problem(value: object) -> str | None:
    """Why ``value`` is not a priority (None: it is): an int, not a bool, in range."""
    if not isinstance(value, int) or isinstance(value, bool):
        return f"priority {cap(repr(value), 100)} is not a whole number"
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        shown = repr(value) if abs(value) < 10**18 else "beyond 10^18"  # str(10**5000) raises
        return f"priority {shown} is outside {MIN_PRIORITY}..{MAX_PRIORITY}"
    return None


def _num(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def stuck_reason(doc: Mapping[str, Any], now: float,
                 horizon: float = LEASE_HORIZON_SECONDS) -> str | None:
    """Why a live-looking row document can never be claimed (None: it can, or it is settled)."""
    state = doc.get("state")
    if state not in ROW_STATES:
        return f"state {cap(repr(state), 200)} is not one of {sorted(ROW_STATES)}"
    if state in SETTLED_STATES:  # settled: the sweep never parks one
        return None
    if not isinstance(doc.get("tenant_id"), str):
        return f"tenant_id {cap(repr(doc.get('tenant_id')), 200)} is not a string"
    if state == PENDING:
        due = doc.get("not_before")
        if not _num(due):
            return f"pending with not_before {cap(repr(due), 200)}"
        if due > due_limit(now):  # R7: no writer of ours sets one so far ahead
            return (f"pending with not_before {due!r}, due further ahead than any writer sets "
                    f"one ({time_problem('not_before', due) or 'beyond a pause and two days'})")
    if state == CLAIMED:
        lease = doc.get("lease_until")
        if not _num(lease):
            return f"claimed with lease_until {cap(repr(lease), 200)}"
        if lease > now + horizon:
            return f"claimed with lease_until {lease!r}, more than {horizon:.0f}s ahead"
    return None


_DEFAULTS: dict[str, Any] = {
    "tenant_id": "", "row_key": "", "seq": 0, "kind": "launch", "state": FAILED, "sub_id": None,
    "projection": None, "event": None, "attempts": 0, "not_before": 0.0, "claim_id": None,
    "lease_until": None, "consume_marked": False, "errors": [], "audit": [], "outcome": None,
    "trace": None, "created_at": 0.0, "updated_at": 0.0, "materialized_at": 0.0,
    "done_at": None, "priority": 0, "burst_at": None, "coalesced_into": None,
    "burst_closed": False,
}


def _bad_field(exc: msgspec.ValidationError) -> str | None:
    msg = str(exc)
    marker = "- at `$."
    i = msg.rfind(marker)
    if i < 0:
        return None
    path = msg[i + len(marker):].rstrip("`")
    return path.split(".", 1)[0].split("[", 1)[0]


def repaired_fields(doc: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The ``$set`` that makes a broken row document decode as an ``EffectRow`` again (each bad
    top-level field replaced by a clean value), and a note per field replaced. A parked row must
    decode, or ``dead-letters list``/``purge`` could never show it."""
    fixed: dict[str, Any] = {}
    notes: list[str] = []
    work = {k: v for k, v in doc.items() if k != "_id"}
    for _ in range(len(_DEFAULTS) + 1):
        try:
            msgspec.convert(work, EffectRow, builtin_types=(datetime,))
            break
        except (msgspec.ValidationError, TypeError) as exc:
            name = _bad_field(exc) if isinstance(exc, msgspec.ValidationError) else None
            if name is None:
                missing = [f for f in ("tenant_id", "row_key", "seq") if f not in work]
                if not missing:
                    break
                name = missing[0]
            if name not in _DEFAULTS or name in fixed:
                break
            old = work.get(name)
            new = _clean(name, old)
            if isinstance(old, list) and isinstance(new, list) and new:
                dropped = [e for e in old if e not in new]
                notes.append(f"{name}: {len(dropped)} of {len(old)} entries dropped, "
                             f"{cap(repr(dropped), 120)}")
            else:
                notes.append(f"{name} was {cap(repr(old), 120)}")
            fixed[name] = work[name] = new
    return fixed, notes


def _clean(name: str, old: object) -> Any:
    if name in ("errors", "audit") and isinstance(old, list):
        # the entries that decode stay (an error history with one bad time keeps the others)
        entry = ErrorEntry if name == "errors" else AuditEntry
        return [e for e in old if _decodes(e, entry)]
    if name in ("tenant_id", "row_key"):
        return cap(old, 400) if old is not None else ""
    if name in ("seq", "attempts"):
        try:
            value = int(str(old))
        except ValueError:
            return 0
        return value if 0 <= value <= MAX_SEQ else 0
    return _DEFAULTS[name]


def _decodes(value: object, typ: type) -> bool:
    try:
        msgspec.convert(value, typ)
    except (msgspec.ValidationError, TypeError):
        return False
    return True


def park_fields(doc: Mapping[str, Any], *, now: float, error: str, attempt: int | None = None
                ) -> dict[str, Any]:
    """A clean parked state for a row whose shape broke a transition (``$inc`` on a string,
    ``$push`` on a non-array...): one ``$set``, no ``$inc``/``$push``, so it cannot fail on the
    same field again. The error history is kept when it is a list."""
    fixed, notes = repaired_fields(doc)
    errors = doc.get("errors")
    history = fixed.get("errors", list(errors) if isinstance(errors, list) else [])
    text = cap(error + (f" (repaired: {'; '.join(notes)})" if notes else ""))
    attempts = fixed.get("attempts", doc.get("attempts", 0))
    entry = ErrorEntry(attempt=attempt if attempt is not None else int(attempts), at=now,
                       error=text, kind="permanent")
    return {**fixed, "state": FAILED, "lease_until": None, "updated_at": now,
            "outcome": "failed", "errors": [*history, msgspec.to_builtins(entry)],
            "failed_at": datetime.fromtimestamp(now, UTC)}  # the dead-letters' TTL clock (O8)


# --- documents of the service's own collections (members, pointers, tokens, counters, cursors) --




def seqs_by_tenant(collection: str, pairs: Iterable[tuple[object, object]]) -> dict[str, int]:
    """Per-tenant seqs (cursors, counters) parsed one document at a time (R1): a pair whose
    tenant is not a string or whose seq is not a true int is left out and reported once, the
    others stand."""
    out: dict[str, int] = {}
    for t, seq in pairs:
        if isinstance(t, str) and isinstance(seq, int) and is_seq(seq):
            out[t] = seq
            BAD_DOCUMENTS.resolved(collection, t)
        else:
            BAD_DOCUMENTS.report(collection, t, f"seq {cap(repr(seq), 100)} is not an integer seq"
                                 if isinstance(t, str) else "_id is not a string")
    return out


def finite(value: object) -> float | None:
    """``value`` as a float when it is a finite number (int or float, not bool), else None."""
    return float(value) if _num(value) else None


def slot_is_free(doc: Mapping[str, Any], holder: str, now: float) -> bool:
    """F2: may ``holder`` take this in-flight slot document? Yes when it is unheld, held by
    ``holder`` already, expired (``until <= now``: its holder died), or malformed (``slot_problem``:
    taken over, never held forever)."""
    if doc.get("holder") is None or doc.get("holder") == holder:
        return True
    until = finite(doc.get("until"))
    return until is None or until <= now or slot_problem(doc, now) is not None


def slot_problem(doc: Mapping[str, Any], now: float) -> str | None:
    """Why a held slot document cannot have been written by a launch: an ``until`` that is not
    a finite number (NaN, Infinity, a string), or that ends further ahead than any lease can
    (``LEASE_HORIZON_SECONDS``: a ghost planted for a month)."""
    raw = doc.get("until")
    until = finite(raw)
    if until is None:
        return f"until {cap(repr(raw), 100)} is not a finite number"
    if until > now + LEASE_HORIZON_SECONDS:
        return f"until {until!r} is more than {LEASE_HORIZON_SECONDS:.0f}s ahead"
    return None


LIMITS_COLLECTION = "board_outbox_limits"


def report_slot(doc: Mapping[str, Any], slot: str, now: float) -> bool:
    """Is this a held slot that no launch can have written (``slot_problem``)? Reported once
    as a bad document of the limits collection (a warning naming the slot; counted; listed by
    ``status --json``); it is taken over."""
    if doc.get("holder") is None:
        return False
    problem = slot_problem(doc, now)
    if problem is None:
        return False
    BAD_DOCUMENTS.report(LIMITS_COLLECTION, slot, f"{problem}: taken over", level=logging.WARNING)
    return True


def counter_problem(doc: Mapping[str, Any]) -> str | None:
    """Why a rate counter document is not a count: ``n`` not a non-negative integer (a
    ``-1000`` would open its window to a thousand launches)."""
    n = doc.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        return f"n {cap(repr(n), 100)} is not a count"
    return None


def member_problem(member_id: object, expires_at: object, now: float,
                   max_ahead: float | None = None) -> str | None:
    """Why a membership lease cannot be trusted (None: it can). A lease ends at most one lease
    ahead of its last heartbeat: one that ends further ahead than ``max_ahead`` (the heartbeat
    timeout) would hand a member that may be long gone tenants forever (S1)."""
    if not isinstance(member_id, str) or not member_id:
        return f"member id {cap(repr(member_id), 100)} is not a non-empty string"
    problem = time_problem("expires_at", expires_at)
    if problem is not None:
        return problem
    assert _num(expires_at)
    if max_ahead is not None and expires_at > now + max_ahead:
        return (f"lease ends at {expires_at!r}, further ahead than the heartbeat timeout "
                f"({max_ahead:g}s) allows")
    return None


def parse_generation(doc: Mapping[str, Any]) -> ReadModelVersions:
    """A stored generation pointer, parsed on its own: a bad one comes back with ``problem``
    set (its read model's writes fail, alone), never an exception for every pointer."""
    problem = generation_problem(doc)
    if problem is not None:
        return ReadModelVersions(problem=problem)
    return ReadModelVersions(active=int(doc.get("active", 0)), building=doc.get("building"),
                             progress=int(doc.get("progress", 0)))


def generation_problem(doc: Mapping[str, Any]) -> str | None:
    """Why a read-model generation pointer document is unusable (None: it is fine)."""
    active, building, progress = doc.get("active", 0), doc.get("building"), doc.get("progress", 0)
    if not is_seq(active):
        return f"active {cap(repr(active), 100)} is not a generation number"
    if building is not None and not is_seq(building):
        return f"building {cap(repr(building), 100)} is not a generation number"
    if not is_seq(progress):
        return f"progress {cap(repr(progress), 100)} is not a seq"
    return None


def resume_token_problem(token: object) -> str | None:
    """Why a stored change-stream resume token cannot be one (None: it may be; the server still
    has the last word). A resume token is a document with a string or binary ``_data``."""
    if not isinstance(token, Mapping):
        return f"token {cap(repr(token), 100)} is not a document"
    data = token.get("_data")
    if not isinstance(data, (str, bytes)) or not data:
        return f"token has no _data string ({cap(repr(token), 100)})"
    return None


def row_summary(doc: Mapping[str, Any]) -> RowIdentity | None:
    """The audit's view of a stored row (R2: checked here, one document at a time). None: the
    document has no usable row key or seq, so it names no event (the stuck-row sweep and
    ``dead-letters`` deal with it); a missing ``kind`` reads as a launch."""
    key, seq, kind, state = doc.get("row_key"), doc.get("seq"), doc.get("kind", LAUNCH), doc.get("state")
    if not isinstance(key, str) or not isinstance(seq, int) or not is_seq(seq):
        return None
    sub, proj = doc.get("sub_id"), doc.get("projection")
    return RowIdentity(row_key=key, seq=int(seq), kind=kind if isinstance(kind, str) else "?",
                      state=state if isinstance(state, str) else "?",
                      sub_id=sub if isinstance(sub, str) else None,
                      projection=proj if isinstance(proj, str) else None)


def done_latency(doc: Mapping[str, Any]) -> DoneLatency | None:
    """A done row's event insert -> done time in seconds (A5); None when the row does not say
    (no event time, a ``done_at`` that is not a date, a tenant that is not a string)."""
    tenant, done_at, kind = doc.get("tenant_id"), doc.get("done_at"), doc.get("kind", LAUNCH)
    event = doc.get("event")
    at = stamp(event.get("at")) if isinstance(event, Mapping) else None
    if not isinstance(tenant, str) or not isinstance(done_at, datetime) or not at:
        return None
    if done_at.tzinfo is None:  # a driver without tz_aware: BSON dates are UTC
        done_at = done_at.replace(tzinfo=UTC)
    return DoneLatency(tenant_id=tenant, kind=kind if isinstance(kind, str) else "?",
                       seconds=max(0.0, done_at.timestamp() - at))


SESSION_SECONDS = 8 * 3600  # a console session lasts this long at most
SESSIONS_COLLECTION = "board_outbox_console_sessions"


def console_session(session_id: str, doc: Mapping[str, Any], now: float
                    ) -> ConsoleSession | None:
    """A stored console session, parsed (the console's logins): None when it has ended, or when its document
    does not parse or promises more than one session's length (a planted or hand-edited one is
    refused and reported, never trusted)."""
    tag, who, until = doc.get("token_tag"), doc.get("who"), stamp(doc.get("expires_at"))
    problem = None
    if not isinstance(tag, str) or not tag:
        problem = f"token_tag {cap(repr(tag), 60)} is not a non-empty string"
    elif not isinstance(who, str):
        problem = f"who {cap(repr(who), 60)} is not a string"
    elif until is None:
        problem = time_problem("expires_at", doc.get("expires_at"))
    elif until > now + SESSION_SECONDS + 60:
        problem = f"expires_at {until!r} is further ahead than one session ({SESSION_SECONDS}s)"
    if problem is not None:
        BAD_DOCUMENTS.report(SESSIONS_COLLECTION, session_id[:12] + "…", problem,
                             level=logging.WARNING)
        return None
    assert isinstance(tag, str) and isinstance(who, str) and until is not None
    if until <= now:
        return None
    return ConsoleSession(session_id=session_id, token_tag=tag, who=cap(who, 64),
                          expires_at=until)
