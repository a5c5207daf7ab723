"""The documents and their indexes (by row key; each tenant's live rows, in insertion order),
the test helpers that plant and remove documents behind the service's back, and what every
concern does to one document as the server would: match a row filter, check and apply a
transition, decode."""

from __future__ import annotations

import itertools
import logging
from typing import Any, TypeGuard

from board_outbox.model import transitions as T
from board_outbox.model.bad_documents import OnceLog
from board_outbox.model.codec import from_doc, to_doc
from board_outbox.model.errors import MalformedRow, StoreError
from board_outbox.model.rows import LIVE_STATES, PENDING, EffectRow
from board_outbox.ports import RowFilter

_once = OnceLog(logging.getLogger("board_outbox.outbox"))


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _matches(doc: dict[str, Any], flt: RowFilter) -> bool:
    if flt.tenant_id is not None and doc.get("tenant_id") != flt.tenant_id:
        return False
    if flt.states and doc.get("state") not in flt.states:
        return False
    if flt.kind is not None and doc.get("kind", "launch") != flt.kind:
        return False
    if flt.sub_ids and doc.get("sub_id") not in flt.sub_ids:
        return False
    upd = doc.get("updated_at", 0.0)
    if (flt.updated_after is not None or flt.updated_before is not None) and not _number(upd):
        return False  # as the server: a time bound matches numbers only (a string is no time)
    if flt.updated_after is not None and not upd >= flt.updated_after:
        return False
    return not (flt.updated_before is not None and not upd < flt.updated_before)


def _check(doc: dict[str, Any], t: T.Transition) -> None:
    """Like the server, refuse ``$inc`` on a non-number and ``$push`` onto a non-array
    (StoreError, ``transitions.refusal``)."""
    problem = T.refusal(doc, t)
    if problem is not None:
        raise StoreError(problem)


def _apply(doc: dict[str, Any], t: T.Transition) -> None:
    """A transition as a dict update; a refused one (``_check``) changes nothing."""
    _check(doc, t)
    doc.update(t.set)
    if t.count_attempt:
        doc["attempts"] = doc.get("attempts", 0) + 1
    if t.error is not None:
        doc.setdefault("errors", []).append(to_doc(t.error))
    if t.audit is not None:
        doc.setdefault("audit", []).append(to_doc(t.audit))


def _decode(doc: dict[str, Any]) -> EffectRow:
    return from_doc(doc, EffectRow, MalformedRow)


class OutboxDocs:
    """The documents every concern's mixin reads and writes."""

    def __init__(self) -> None:
        self._docs: dict[int, dict[str, Any]] = {}
        self._by_key: dict[str, int] = {}
        self._live: dict[str, dict[int, None]] = {}  # tenant -> live refs, insertion ordered
        self._ids = itertools.count(1)

    # --- test helpers ------------------------------------------------------------------------

    def insert_raw(self, doc: dict[str, Any]) -> int:
        """Plant a document as-is (e.g. a malformed or legacy row without ``kind``)."""
        ref = next(self._ids)
        self._docs[ref] = dict(doc)
        if isinstance(doc.get("row_key"), str):
            self._by_key[doc["row_key"]] = ref
        self._track(ref)
        return ref

    def raw(self, row_key: str) -> dict[str, Any] | None:
        ref = self._by_key.get(row_key)
        return None if ref is None else self._docs[ref]

    def delete_raw(self, row_key: str) -> bool:
        """Delete a row behind the service's back (what the completeness audit must find)."""
        ref = self._by_key.pop(row_key, None)
        if ref is None:
            return False
        doc = self._docs.pop(ref)
        tenant = doc.get("tenant_id")
        if isinstance(tenant, str):
            self._live.get(tenant, {}).pop(ref, None)
        return True

    def all_docs(self) -> list[dict[str, Any]]:
        return list(self._docs.values())

    def _track(self, ref: int) -> None:
        doc = self._docs[ref]
        tenant = doc.get("tenant_id")
        if not isinstance(tenant, str):
            return
        live = self._live.setdefault(tenant, {})
        if doc.get("state", PENDING) in LIVE_STATES:
            live[ref] = None
        else:
            live.pop(ref, None)
