"""Pauses (F3): an operator holds the effects of a tenant, a subscription or a bot until
they resume them. Pure: the pause document and how it is parsed, the reason a held row carries,
and how a held row's due time is set aside and given back.

A pause document (one per scope and key, ``_id`` = ``"<scope>:<key>"``)::

    {scope: "tenant" | "subscription" | "bot", key, active: bool, reason, by, at,
     audit: [{at, action: "pause" | "resume", by, detail}]}

``resume`` keeps the document (``active: false``) so its audit survives. A held row is a pending
row whose ``not_before`` was moved ``HELD_OFFSET`` seconds ahead (out of every claim's reach, its
order among the others kept) and whose ``waiting`` names the pause (``reason_of``); releasing it
moves ``not_before`` back by the same offset: it is due again at its own time, in its order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

import msgspec

from board_outbox.model.bad_documents import BAD_DOCUMENTS, cap
from board_outbox.model.codec import decode_problem
from board_outbox.model.errors import InvalidId
from board_outbox.model.ids import check_id
from board_outbox.model.rows import AuditEntry
from board_outbox.model.times import HELD_OFFSET, Stamp, time_problem
from board_outbox.model.validation import finite, tenant_problem

__all__ = ["AUDIT_KEEP", "HELD_OFFSET", "MAX_REASON", "PAUSES_COLLECTION", "SCOPES", "Pause",
           "PauseScope", "append_audit", "decode_pause", "good_audit", "held_not_before", "is_held",
           "key_problem", "parse_pause", "parse_pauses", "pause_id", "paused_by", "reason_of",
           "text_problem", "was_on"]

PAUSES_COLLECTION: Final = "board_outbox_pauses"
PauseScope = Literal["tenant", "subscription", "bot"]
SCOPES: Final[tuple[PauseScope, ...]] = ("tenant", "subscription", "bot")
MAX_REASON: Final = 500  # characters of an operator's reason
MAX_BOT: Final = 200  # characters of a bot name a pause can name
MAX_BY: Final = 200
AUDIT_KEEP: Final = 50  # the newest audit entries a pause document keeps
HELD_PREFIX: Final = "paused: "


class Pause(msgspec.Struct, frozen=True, kw_only=True):
    """One pause document, parsed. ``at`` / ``by`` / ``reason``: the last ``pause`` of it (a
    pause that is on again with a new reason keeps its ``since``)."""

    scope: PauseScope
    key: str
    active: bool
    reason: str = ""
    by: str = ""
    at: Stamp
    audit: tuple[AuditEntry, ...] = ()

    @property
    def since(self) -> float:
        """When it went on: its first ``pause`` after the last ``resume`` its audit keeps (the
        audit keeps the newest ``AUDIT_KEEP``: at least since then), else ``at``."""
        start = self.at
        for entry in reversed(self.audit):
            if entry.action == "resume":
                break
            if entry.action == "pause":
                start = min(start, entry.at)
        return start

    @property
    def id(self) -> str:
        return pause_id(self.scope, self.key)

    @property
    def holds(self) -> str:
        """What a row this pause holds says it waits on (its ``waiting``)."""
        return reason_of(self.scope, self.key)

    @property
    def lifted(self) -> AuditEntry | None:
        """Its last ``resume`` (None: never resumed, or not kept by the audit)."""
        return next((e for e in reversed(self.audit) if e.action == "resume"), None)


def pause_id(scope: str, key: str) -> str:
    return f"{scope}:{key}"


def reason_of(scope: str, key: str) -> str:
    """A held row's ``waiting``: ``paused: tenant acme``."""
    return f"{HELD_PREFIX}{scope} {key}"


def paused_by(waiting: str | None) -> tuple[PauseScope, str] | None:
    """The (scope, key) a held row's ``waiting`` names (``reason_of`` read back); None: it names
    no pause."""
    if not waiting or not waiting.startswith(HELD_PREFIX):
        return None
    scope, _sep, key = waiting[len(HELD_PREFIX):].partition(" ")
    for s in SCOPES:
        if s == scope and key:
            return s, key
    return None


def key_problem(scope: object, key: object) -> str | None:
    """Why (``scope``, ``key``) cannot be paused (None: it can). Tenant and subscription ids are
    ids (``check_id``); a bot is any printable name of 1 to 200 characters."""
    if scope not in SCOPES:
        return f"scope {cap(repr(scope), 60)} is not one of {', '.join(SCOPES)}"
    if not isinstance(key, str):
        return f"{scope} {cap(repr(key), 100)} is not a string"
    if scope == "tenant":
        return tenant_problem(key)
    if scope == "subscription":
        try:
            check_id("subscription id", key)
        except InvalidId as exc:
            return str(exc)
        return None
    if not key or len(key) > MAX_BOT or not key.isprintable() or key != key.strip():
        return (f"invalid bot {cap(repr(key), 100)}: use 1-{MAX_BOT} printable characters, "
                "without leading or trailing spaces")
    return None


def text_problem(name: str, value: object, limit: int) -> str | None:
    """Why an operator's text (a reason, a name) cannot be stored: not a string, longer than
    ``limit``, or carrying a control character."""
    if not isinstance(value, str):
        return f"{name} {cap(repr(value), 60)} is not a string"
    if len(value) > limit:
        return f"{name} is {len(value)} characters long (at most {limit})"
    if not value.isprintable():
        return f"{name} carries a control character"
    return None


def is_held(not_before: object) -> bool:
    """Is a pending row with this ``not_before`` held by a pause?"""
    nb = finite(not_before)
    return nb is not None and nb >= HELD_OFFSET


def held_not_before(not_before: float) -> float:
    """A row's ``not_before`` while a pause holds it (already held: unchanged)."""
    return not_before if not_before >= HELD_OFFSET else not_before + HELD_OFFSET


def parse_pause(doc_id: object, doc: Mapping[str, Any]) -> Pause | None:
    """A stored pause document, parsed at the boundary (R1): None when it does not parse -- a
    scope outside ``SCOPES``, a key that is not one, an ``_id`` that names another pause, a
    field of the wrong type -- reported once as a bad document of the pauses collection. Such a
    document pauses nothing, and unpauses nothing else (``pause`` writes it whole again)."""
    got = decode_pause(doc_id, doc)
    key = cap(doc_id, 200)
    if isinstance(got, str):
        BAD_DOCUMENTS.report(PAUSES_COLLECTION, key, got, level=logging.WARNING)
        return None
    BAD_DOCUMENTS.resolved(PAUSES_COLLECTION, key)
    return got


def parse_pauses(docs: Iterable[tuple[object, Mapping[str, Any]]]) -> list[Pause]:
    """The pauses among stored documents (``(_id, document)`` pairs), each parsed on its own
    (``parse_pause``): one that does not parse is left out and reported, and the others stand."""
    return [pause for doc_id, doc in docs if (pause := parse_pause(doc_id, doc)) is not None]


def decode_pause(doc_id: object, doc: Mapping[str, Any]) -> Pause | str:
    """``parse_pause`` without the report: the pause, or why the document is not one."""
    problem = _problem(doc_id, doc)
    if problem is not None:
        return problem
    fields = {k: doc[k] for k in ("scope", "key", "active", "reason", "by", "at", "audit")
              if k in doc}
    try:
        return msgspec.convert(fields, Pause)
    except msgspec.ValidationError as exc:
        return cap(decode_problem(fields, str(exc)), 300)


def append_audit(audit: object, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored ``audit`` (not a list: none) with ``entry`` appended, its newest ``AUDIT_KEEP``
    kept: what the store's ``$push`` with ``$slice`` leaves, for a backend that writes the
    array itself (the in-memory twin)."""
    return [*(audit if isinstance(audit, list) else []), entry][-AUDIT_KEEP:]


def good_audit(doc: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The entries of a stored document's ``audit`` that are audit entries (the newest
    ``AUDIT_KEEP - 1``: room for one more): what a document written whole again keeps."""
    audit = doc.get("audit") if doc is not None else None
    if not isinstance(audit, list):
        return []
    kept = []
    for entry in audit[-(AUDIT_KEEP - 1):]:
        try:
            msgspec.convert(entry, AuditEntry)
        except (msgspec.ValidationError, TypeError):
            continue
        kept.append(entry)
    return kept


def was_on(doc_id: object, doc: Mapping[str, Any] | None) -> bool:
    """Was this stored document (None: none) a pause that is on? A bad one never was."""
    if doc is None:
        return False
    got = decode_pause(doc_id, doc)
    return not isinstance(got, str) and got.active


def _problem(doc_id: object, doc: Mapping[str, Any]) -> str | None:
    scope, key = doc.get("scope"), doc.get("key")
    problem = key_problem(scope, key)
    if problem is not None:
        return problem
    if doc_id != pause_id(str(scope), str(key)):
        return f"_id {cap(repr(doc_id), 100)} does not name {pause_id(str(scope), str(key))!r}"
    if not isinstance(doc.get("active"), bool):
        return f"active {cap(repr(doc.get('active')), 60)} is not true or false"
    for name, limit in (("reason", MAX_REASON), ("by", MAX_BY)):
        if name in doc and (problem := text_problem(name, doc[name], limit)) is not None:
            return problem
    if (problem := time_problem("at", doc.get("at"))) is not None:
        return problem
    audit = doc.get("audit", [])
    if not isinstance(audit, list) or len(audit) > 10 * AUDIT_KEEP:
        return f"audit is not a list of at most {10 * AUDIT_KEEP} entries"
    return None
