"""``trigger_subscriptions`` on MongoDB."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from board_outbox.adapters.mongo.errors import translated
from board_outbox.model.domain import Subscription, check_id, check_kind, from_doc, to_doc
from board_outbox.model.errors import MalformedDocument, SubscriptionNotFound
from board_outbox.model.validation import OnceLog, cap, subscription_problem

SUBSCRIPTIONS = "trigger_subscriptions"

log = logging.getLogger("board_outbox.mongo")
_once = OnceLog(log)


def _malformed_sub(ref: object, detail: str) -> MalformedDocument:
    return MalformedDocument("subscription", ref, cap(detail, 500))


def _decode(doc: dict[str, Any]) -> Subscription:
    sub = from_doc(doc, Subscription, _malformed_sub)
    problem = subscription_problem(sub)
    if problem is not None:
        raise _malformed_sub(doc.get("_id"), problem)
    return sub


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
        return _decode(doc)

    @translated
    async def list_for_tenant(self, tenant_id: str) -> list[Subscription]:
        out: list[Subscription] = []
        for doc in await self.coll.find({"tenant_id": tenant_id}).sort("_id", 1).to_list(None):
            try:
                out.append(_decode(doc))
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
