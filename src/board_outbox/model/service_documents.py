"""The documents of the service's own collections, each parsed on its own (R1): per-tenant
seqs (cursors, counters), limit slots and rate counters, membership leases, read-model
generation pointers, change-stream resume tokens and console sessions.

Separate from the board's and the rows' documents: the service writes these for itself, and a
bad one costs only itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from board_outbox.model.bad_documents import BAD_DOCUMENTS, cap
from board_outbox.model.records import ConsoleSession, ReadModelVersions
from board_outbox.model.row_documents import LEASE_HORIZON_SECONDS
from board_outbox.model.times import stamp, time_problem
from board_outbox.model.validation import finite, is_number, is_seq


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
    assert is_number(expires_at)
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
