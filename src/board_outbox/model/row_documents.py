"""A stored effect row read as a raw document, before (or instead of) decoding it: why a live
one can never be claimed (``stuck_reason``), the clean ``$set`` that parks a broken one
(``repaired_fields``, ``park_fields``), and the parts the audit reads of any row (``row_summary``,
``done_latency``).

Separate from the row's type (``rows``): these read documents that may not decode at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec

from board_outbox.model.bad_documents import cap
from board_outbox.model.ids import LAUNCH
from board_outbox.model.records import DoneLatency, RowIdentity
from board_outbox.model.row_keys import MAX_SEQ
from board_outbox.model.rows import (
    CLAIMED,
    FAILED,
    PENDING,
    SETTLED_STATES,
    AuditEntry,
    EffectRow,
    ErrorEntry,
)
from board_outbox.model.times import due_limit, stamp, time_problem
from board_outbox.model.validation import is_number, is_seq

ROW_STATES = frozenset({PENDING, CLAIMED, *SETTLED_STATES})
LEASE_HORIZON_SECONDS = 86400.0  # a lease ending later than this from now is not a lease


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
        if not is_number(due):
            return f"pending with not_before {cap(repr(due), 200)}"
        if due > due_limit(now):  # R7: no writer of ours sets one so far ahead
            return (f"pending with not_before {due!r}, due further ahead than any writer sets "
                    f"one ({time_problem('not_before', due) or 'beyond a pause and two days'})")
    if state == CLAIMED:
        lease = doc.get("lease_until")
        if not is_number(lease):
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
