"""A stored subscription as the operator's commands see it (P6): the subscription when its
document decodes (else the problem, so a listing names it instead of failing), the audit of the
operators' writes kept in the document, and its revision (each write is conditional on it, so
two operators editing at once cannot lose one's change).

A leaf: plain values, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from board_outbox.model.rows import AuditEntry
from board_outbox.model.subscriptions import Subscription

__all__ = ["AUDIT_KEEP", "SUBSCRIPTIONS_COLLECTION", "SubscriptionRecord", "parse_audit",
           "parse_rev"]

SUBSCRIPTIONS_COLLECTION: Final = "trigger_subscriptions"
AUDIT_KEEP: Final = 50  # the newest audit entries a subscription document keeps


class SubscriptionRecord(msgspec.Struct, kw_only=True):
    """One subscription document. ``sub`` is None when it does not decode (``problem`` says
    why: the service ignores such a document, and so it matches nothing)."""

    sub_id: str  # the document's ``sub_id`` (or its ``_id`` when that is not a string)
    sub: Subscription | None
    problem: str | None = None
    tenant_id: str | None = None  # as stored, when it is a string
    audit: list[AuditEntry] = msgspec.field(default_factory=list)
    rev: int = 0  # the operators' writes count it up; a document no command wrote: 0
    # the stored document's ``_id`` when it is not ``sub_id`` (a document some other tool
    # wrote): the writes address it by that
    ref: Any = None


def parse_audit(raw: object) -> list[AuditEntry]:
    """The entries of a stored ``audit`` that decode (a bad one is left out, alone)."""
    if not isinstance(raw, list):
        return []
    out = []
    for entry in raw[-AUDIT_KEEP:]:
        try:
            out.append(msgspec.convert(entry, AuditEntry))
        except (msgspec.ValidationError, TypeError):
            continue
    return out


def parse_rev(doc: Mapping[str, Any]) -> int:
    """The document's revision: a missing (or hand-mangled) one reads as 0."""
    rev = doc.get("rev")
    return rev if isinstance(rev, int) and not isinstance(rev, bool) and rev >= 0 else 0
