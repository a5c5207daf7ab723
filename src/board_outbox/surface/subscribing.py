"""The operators' subscription management (P6), shared by the command line (``subscriptions
add|list|show|edit|disable|enable|rm``) and the console: each checks its input the way the
service decodes a stored subscription (``build``: msgspec into ``Subscription``, then
``subscription_problem``, so nothing is written that the service would ignore), writes one
document through ``SubscriptionAdmin`` (its audit entry -- action, who, when, what changed --
in the same write, conditional on the revision read) and logs one line. The running replicas
see the change like any other: the tail reads a tenant's subscriptions for every batch, and
the subscription cache drops what it holds on any change (M10b)."""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Mapping
from typing import Any, Final

import msgspec

from board_outbox.model.bad_documents import cap
from board_outbox.model.codec import to_doc
from board_outbox.model.errors import BoardOutboxError, InvalidId, UsageError
from board_outbox.model.ids import LAUNCH, check_id
from board_outbox.model.pause import MAX_BY, key_problem, text_problem
from board_outbox.model.rows import AuditEntry
from board_outbox.model.subscription_records import SubscriptionRecord
from board_outbox.model.subscriptions import Subscription
from board_outbox.model.validation import subscription_problem
from board_outbox.ports import Stores, SubscriptionAdmin

__all__ = ["FIELDS", "Changed", "add", "build", "changes_between", "decoded", "known", "listing",
           "merge", "record", "remove", "replace", "set_enabled", "summary"]

log = logging.getLogger("board_outbox.admin")

FIELDS: Final = frozenset(Subscription.__struct_fields__)
RULE_FIELDS: Final = frozenset({"event_types", "column", "labels_all"})
MAX_NAME: Final = 200  # characters of an event type, a column or a label
LISTED: Final = 10_000  # subscription documents one listing reads at most


class Changed(BoardOutboxError):
    """The subscription changed (or went away) between the read and the write: nothing was
    written; read it again (exit 1)."""


def _admin(stores: Stores) -> SubscriptionAdmin:
    if stores.sub_admin is None:
        raise UsageError("this backend offers no subscription management")
    return stores.sub_admin


_AT = re.compile(r" - at `\$\.?([^`]*)`$")


def _decode_problem(exc: msgspec.ValidationError) -> str:
    """msgspec's refusal as "FIELD: what was expected"."""
    text = str(exc)
    m = _AT.search(text)
    where, what = (m.group(1), text[: m.start()]) if m else ("", text)
    what = what[0].lower() + what[1:] if what else what
    return f"{where}: {what}" if where else what


def _name_problem(what: str, value: object) -> str | None:
    if not isinstance(value, str):
        return f"{what} {cap(repr(value), 60)} is not a string"
    if not value or len(value) > MAX_NAME or not value.isprintable() or value != value.strip():
        return (f"{what} {cap(repr(value), 60)}: use 1-{MAX_NAME} printable characters, without "
                "leading or trailing spaces")
    return None


def build(fields: Mapping[str, Any], *, kinds: Collection[str] | None = None) -> Subscription:
    """The subscription ``fields`` describe (a stored document's fields: ``sub_id``,
    ``tenant_id``, ``bot``, ``rule`` {``event_types``, ``column``, ``labels_all``}, ``kind``,
    ``consume_labels``, ``enabled``, ``priority``, ``coalesce`` {``quiet_seconds``,
    ``max_wait_seconds``}, ``max_in_flight``, ``max_per_second``), decoded as the service
    decodes a stored one and held to what it requires; a ``UsageError`` (one line naming the
    field) otherwise. ``kinds``: the effect kinds this configuration runs (None: not checked)."""
    unknown = sorted(set(fields) - FIELDS)
    if unknown:
        raise UsageError(f"subscription: unknown field {cap(unknown[0], 60)!r} (fields: "
                         f"{', '.join(sorted(FIELDS))})")
    rule = fields.get("rule")
    if isinstance(rule, Mapping) and (extra := sorted(set(rule) - RULE_FIELDS)):
        raise UsageError(f"subscription: unknown rule field {cap(extra[0], 60)!r} (rule "
                         f"fields: {', '.join(sorted(RULE_FIELDS))})")
    name = fields.get("sub_id")
    try:
        check_id("subscription id", name)  # type: ignore[arg-type]
        check_id("tenant", fields.get("tenant_id"))  # type: ignore[arg-type]
    except InvalidId as exc:
        raise UsageError(f"subscription: {exc}") from None
    where = f"subscription {name}"
    try:
        sub = msgspec.convert(dict(fields), Subscription)
    except msgspec.ValidationError as exc:
        raise UsageError(f"{where}: {_decode_problem(exc)}") from None
    problem = subscription_problem(sub) or key_problem("bot", sub.bot)
    names = [("event type", e) for e in sub.rule.event_types] + \
        [("label", x) for x in (*sub.rule.labels_all, *sub.consume_labels)]
    if sub.rule.column is not None:
        names.append(("column", sub.rule.column))
    for what, value in names:
        problem = problem or _name_problem(what, value)
    if problem is None and kinds is not None and sub.kind not in kinds:
        problem = (f"no handler runs effect kind {sub.kind!r} in this configuration (kinds: "
                   f"{', '.join(sorted(kinds))}): every row it owes would be dead-lettered; "
                   "add it under [handlers], or --force")
    if problem is not None:
        raise UsageError(f"{where}: {problem}")
    # what is stored must decode to this very subscription (the service reads the document)
    if msgspec.convert(to_doc(sub), Subscription) != sub:
        raise UsageError(f"{where}: does not read back as written")
    return sub


def known(handlers: Collection[str]) -> frozenset[str]:
    """The effect kinds a subscription may name under a configuration whose user kinds are
    ``handlers`` (``[handlers]`` and the entry points, resolved)."""
    return frozenset({LAUNCH, *handlers})


def merge(current: Subscription, changes: Mapping[str, Any]) -> dict[str, Any]:
    """``current``'s fields with ``changes`` applied (``rule.X`` names a rule field); the
    tenant and the id cannot change (a new subscription is another id)."""
    fields = to_doc(current)
    for key, value in changes.items():
        if key in ("tenant_id", "sub_id") and value != fields[key]:
            raise UsageError(f"subscription {current.sub_id}: its {key} cannot change (add a "
                             "new subscription and remove this one)")
        top, _, sub = key.partition(".")
        if sub:
            fields[top] = {**(fields.get(top) or {}), sub: value}
        else:
            fields[key] = value
    return fields


def _by(by: str) -> str:
    problem = text_problem("--by", by, MAX_BY)
    if problem is not None or not by:
        raise UsageError(problem or "--by: who does this (for the audit) is empty")
    return by


def summary(sub: Subscription) -> str:
    """One line: what the subscription does, for listings and audit entries."""
    r = sub.rule
    parts = [f"{sub.kind} {sub.bot}" if sub.kind != LAUNCH else f"launch {sub.bot}",
             "on " + ("|".join(r.event_types) if r.event_types else "any event")]
    if r.column is not None:
        parts.append(f"in column {r.column!r}")
    if r.labels_all:
        parts.append("labelled " + "+".join(r.labels_all))
    if sub.consume_labels:
        parts.append("consuming " + "+".join(sub.consume_labels))
    if sub.priority:
        parts.append(f"priority {sub.priority}")
    if sub.coalesce is not None:
        parts.append(f"coalesce {sub.coalesce.quiet_seconds:g}s/{sub.coalesce.max_wait_seconds:g}s")
    if sub.max_in_flight is not None:
        parts.append(f"max {sub.max_in_flight} in flight")
    if sub.max_per_second is not None:
        parts.append(f"max {sub.max_per_second:g}/s")
    if not sub.enabled:
        parts.append("DISABLED")
    return ", ".join(parts)


def changes_between(before: Subscription, after: Subscription) -> str:
    """What differs, field by field: ``priority 0 -> 5; rule.column None -> 'Done'``."""
    a, b = to_doc(before), to_doc(after)
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) == b.get(key):
            continue
        if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
            for sub in sorted(set(a[key]) | set(b[key])):
                if a[key].get(sub) != b[key].get(sub):
                    out.append(f"{key}.{sub} {a[key].get(sub)!r} -> {b[key].get(sub)!r}")
        else:
            out.append(f"{key} {a.get(key)!r} -> {b.get(key)!r}")
    return cap("; ".join(out) or "nothing changed", 1000)


async def record(stores: Stores, sub_id: str) -> SubscriptionRecord:
    """The stored subscription ``sub_id`` (decoded or not); a ``UsageError`` when none."""
    try:
        check_id("subscription id", sub_id)
    except InvalidId as exc:
        raise UsageError(f"subscription: {exc}") from None
    got = await _admin(stores).record(sub_id)
    if got is None:
        raise UsageError(f"no subscription {sub_id!r} (`board-outbox subscriptions list` lists "
                         "them)")
    return got


async def listing(stores: Stores, tenant_id: str | None = None) -> list[SubscriptionRecord]:
    """The subscriptions (of ``tenant_id``), by id: one that does not decode is listed with its
    problem."""
    if tenant_id is not None:
        try:
            check_id("tenant", tenant_id)
        except InvalidId as exc:
            raise UsageError(f"subscriptions: {exc}") from None
    return await _admin(stores).records(tenant_id, LISTED)


async def add(stores: Stores, sub: Subscription, *, by: str, now: float) -> None:
    """Write a new subscription; a ``UsageError`` when its id is taken. Audited."""
    entry = AuditEntry(at=now, action="add", by=_by(by), detail=summary(sub))
    if not await _admin(stores).create(sub, entry):
        raise UsageError(f"subscription {sub.sub_id!r} exists already (`board-outbox "
                         f"subscriptions edit {sub.sub_id}` changes it)")
    log.info("subscription %s added by %s: %s", sub.sub_id, by, entry.detail,
             extra={"sub_id": sub.sub_id, "tenant_id": sub.tenant_id, "by": by,
                    "action": "subscription add"})


def decoded(rec: SubscriptionRecord) -> Subscription:
    """The record's subscription; a ``UsageError`` when its document does not decode."""
    if rec.sub is None:
        raise UsageError(f"subscription {rec.sub_id!r} is stored but does not decode "
                         f"({rec.problem}): the service ignores it; remove it (`board-outbox "
                         f"subscriptions rm {rec.sub_id}`) and add it again")
    return rec.sub


async def replace(stores: Stores, rec: SubscriptionRecord, new: Subscription, *, by: str,
                  now: float, action: str = "edit") -> Subscription:
    """Write ``new`` over the subscription ``rec`` read, if it is still as read (else
    ``Changed``). Audited with what changed."""
    before = decoded(rec)
    if new.sub_id != before.sub_id or new.tenant_id != before.tenant_id:
        raise UsageError(f"subscription {before.sub_id}: its id and tenant cannot change")
    entry = AuditEntry(at=now, action=action, by=_by(by), detail=changes_between(before, new))
    if not await _admin(stores).update(new, entry, rec.rev, rec.ref):
        raise Changed(f"subscription {before.sub_id!r} changed or was removed since it was read "
                      "(another operator?): nothing written; look again and retry")
    log.info("subscription %s %s by %s: %s", new.sub_id, action, by, entry.detail,
             extra={"sub_id": new.sub_id, "tenant_id": new.tenant_id, "by": by,
                    "action": f"subscription {action}"})
    return new


async def set_enabled(stores: Stores, sub_id: str, enabled: bool, *, by: str,
                      now: float) -> bool:
    """Enable or disable ``sub_id``; False when it already was. Audited."""
    rec = await record(stores, sub_id)
    sub = decoded(rec)
    if sub.enabled == enabled:
        return False
    await replace(stores, rec, msgspec.structs.replace(sub, enabled=enabled), by=by, now=now,
                  action="enable" if enabled else "disable")
    return True


async def remove(stores: Stores, sub_id: str, *, by: str, now: float) -> SubscriptionRecord:
    """Delete ``sub_id`` (a document that does not decode too), if it is still as read. The
    audit of a removal is its log line, which carries the whole document removed (it is the
    document's own audit that goes with it): ``add --file`` restores it."""
    rec = await record(stores, sub_id)
    _by(by)
    if not await _admin(stores).remove(rec.sub_id, rec.rev, rec.ref):
        raise Changed(f"subscription {sub_id!r} changed or was removed since it was read: "
                      "nothing removed; look again and retry")
    what = to_doc(rec.sub) if rec.sub is not None else {"problem": rec.problem}
    log.info("subscription %s removed by %s (its document was: %s)", sub_id, by,
             cap(msgspec.json.encode(what).decode(), 4000),
             extra={"sub_id": sub_id, "tenant_id": rec.tenant_id, "by": by,
                    "action": "subscription rm"})
    return rec
