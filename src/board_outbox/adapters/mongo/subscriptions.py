"""``trigger_subscriptions`` on MongoDB."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from pymongo.errors import DuplicateKeyError, OperationFailure

from board_outbox.adapters.mongo.errors import is_transient, translated
from board_outbox.model.bad_documents import OnceLog, cap
from board_outbox.model.codec import from_doc, to_doc
from board_outbox.model.errors import MalformedDocument, SubscriptionNotFound
from board_outbox.model.ids import check_id, check_kind
from board_outbox.model.rows import AuditEntry
from board_outbox.model.subscription_records import (
    AUDIT_KEEP,
    SUBSCRIPTIONS_COLLECTION,
    SubscriptionRecord,
    parse_audit,
    parse_rev,
)
from board_outbox.model.subscriptions import Subscription
from board_outbox.model.validation import subscription_problem

SUBSCRIPTIONS = SUBSCRIPTIONS_COLLECTION

log = logging.getLogger("board_outbox.mongo")
_once = OnceLog(log)


def _malformed_sub(ref: object, detail: str) -> MalformedDocument:
    return MalformedDocument("subscription", ref, cap(detail, 500))


def decode_subscription(doc: dict[str, Any]) -> Subscription:
    """A stored subscription as the service reads it: decoded, then ``subscription_problem``
    (``MalformedDocument`` naming why not). Its JSON Schema is held to this
    (``board_outbox/schemas/trigger_subscriptions.schema.json``)."""
    sub = from_doc(doc, Subscription, _malformed_sub)
    problem = subscription_problem(sub)
    if problem is not None:
        raise _malformed_sub(doc.get("_id"), problem)
    return sub


def _record(doc: dict[str, Any]) -> SubscriptionRecord:
    """One stored document as the operators see it (P6): decoded the service's way, or named
    with its problem."""
    raw_id, raw_sub = doc.get("_id"), doc.get("sub_id")
    sub_id = raw_sub if isinstance(raw_sub, str) else raw_id if isinstance(raw_id, str) \
        else cap(repr(raw_id), 80)
    tenant = doc.get("tenant_id")
    try:
        sub: Subscription | None = decode_subscription(doc)
        problem = None
    except MalformedDocument as exc:
        sub, problem = None, exc.detail
    return SubscriptionRecord(sub_id=sub_id, sub=sub, problem=problem,
                              tenant_id=tenant if isinstance(tenant, str) else None,
                              audit=parse_audit(doc.get("audit")), rev=parse_rev(doc),
                              ref=None if raw_id == sub_id else raw_id)


def _at_rev(sub_id: str, rev: int, ref: object = None) -> dict[str, Any]:
    """The filter of ``sub_id``'s document (``ref``: its ``_id``, when that is not its id) at
    revision ``rev`` (0: no command wrote it yet)."""
    return {"_id": sub_id if ref is None else ref, "rev": rev if rev else {"$in": [None, 0]}}


class MongoSubscriptionStore:
    def __init__(self, db: Any) -> None:
        self.coll = db[SUBSCRIPTIONS]

    @translated
    async def get(self, sub_id: str) -> Subscription:
        doc = await self.coll.find_one({"_id": sub_id})
        if doc is None:
            # R2: a subscription written with an _id other than its sub_id is still found
            doc = await self.coll.find_one({"sub_id": sub_id})
        if doc is None:
            raise SubscriptionNotFound(sub_id)
        return decode_subscription(doc)

    @translated
    async def list_for_tenant(self, tenant_id: str) -> list[Subscription]:
        out: list[Subscription] = []
        for doc in await self.coll.find({"tenant_id": tenant_id}).sort("_id", 1).to_list(None):
            try:
                out.append(decode_subscription(doc))
            except MalformedDocument as exc:  # one bad subscription must not stall the tenant
                # once per distinct problem, not once per batch of every tenant it names (R1)
                _once(("sub", repr(doc.get("_id")), str(exc)), logging.ERROR,
                      "ignoring malformed subscription: %s", exc, extra={"tenant_id": tenant_id})
        return out

    @translated
    async def get_many(self, sub_ids: Collection[str]) -> dict[str, Subscription]:
        out: dict[str, Subscription] = {}
        for doc in await self.coll.find({"_id": {"$in": list(sub_ids)}}).to_list(None):
            try:
                sub = from_doc(doc, Subscription, _malformed_sub)
            except MalformedDocument:
                continue  # left out: ``get`` reports it when the row runs
            out[sub.sub_id] = sub
        return out

    @translated
    async def tenants(self) -> set[str]:
        return {str(t) for t in await self.coll.distinct("tenant_id", {"enabled": {"$ne": False}})}

    @translated
    async def put(self, sub: Subscription) -> None:
        check_id("tenant_id", sub.tenant_id)
        check_id("sub_id", sub.sub_id)
        check_kind(sub.kind)
        await self.coll.replace_one({"_id": sub.sub_id}, {"_id": sub.sub_id, **to_doc(sub)},
                                    upsert=True)

    @translated
    async def delete(self, sub_id: str) -> None:
        await self.coll.delete_one({"_id": sub_id})

    # --- the operators' management (``SubscriptionAdmin``, P6): each write is one atomic
    # command on one document, its audit entry ``$push``-ed with it (the newest ``AUDIT_KEEP``
    # kept) and conditional on the revision the operator read

    @translated
    async def records(self, tenant_id: str | None = None,
                      limit: int = 1000) -> list[SubscriptionRecord]:
        query = {} if tenant_id is None else {"tenant_id": tenant_id}
        docs = await self.coll.find(query).sort("_id", 1).limit(limit).to_list(None)
        return [_record(doc) for doc in docs]

    @translated
    async def record(self, sub_id: str) -> SubscriptionRecord | None:
        doc = await self.coll.find_one({"_id": sub_id})
        if doc is None:  # R2: written with an _id other than its sub_id
            doc = await self.coll.find_one({"sub_id": sub_id})
        return None if doc is None else _record(doc)

    @translated
    async def create(self, sub: Subscription, entry: AuditEntry) -> bool:
        check_id("tenant_id", sub.tenant_id)
        check_id("sub_id", sub.sub_id)
        check_kind(sub.kind)
        try:
            await self.coll.insert_one({"_id": sub.sub_id, **to_doc(sub), "rev": 1,
                                        "audit": [to_doc(entry)]})
        except DuplicateKeyError:
            return False
        return True

    @translated
    async def update(self, sub: Subscription, entry: AuditEntry, rev: int,
                     ref: object = None) -> bool:
        check_id("tenant_id", sub.tenant_id)
        check_kind(sub.kind)
        fields = {k: v for k, v in to_doc(sub).items() if k != "sub_id"}
        push = {"audit": {"$each": [to_doc(entry)], "$slice": -AUDIT_KEEP}}
        try:
            res = await self.coll.update_one(_at_rev(sub.sub_id, rev, ref), {
                "$set": fields, "$inc": {"rev": 1}, "$push": push})
        except OperationFailure as exc:
            if is_transient(exc):
                raise
            # ``audit`` (or ``rev``) is not what a command writes (hand-edited): both written anew
            res = await self.coll.update_one(_at_rev(sub.sub_id, rev, ref), {
                "$set": {**fields, "rev": rev + 1, "audit": [to_doc(entry)]}})
        return bool(res.matched_count == 1)

    @translated
    async def remove(self, sub_id: str, rev: int, ref: object = None) -> bool:
        res = await self.coll.delete_one(_at_rev(sub_id, rev, ref))
        return bool(res.deleted_count == 1)


