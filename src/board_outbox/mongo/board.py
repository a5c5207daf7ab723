"""Subscriptions, cards with atomic label consume, and projection read models on MongoDB."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pymongo.errors import DuplicateKeyError

from ..domain import Card, Subscription, check_id, from_doc, to_doc
from ..errors import CardNotFound, MalformedCard, MalformedDocument, SubscriptionNotFound
from ..ports import ConsumeOutcome
from .errors import translated

SUBSCRIPTIONS = "trigger_subscriptions"
CARDS = "board_cards"
READ_MODELS = "read_models"

log = logging.getLogger("board_outbox.mongo")


def _malformed_sub(ref: object, detail: str) -> MalformedDocument:
    return MalformedDocument("subscription", ref, detail)


class MongoSubscriptionStore:
    def __init__(self, db: Any) -> None:
        self.coll = db[SUBSCRIPTIONS]

    @translated
    async def get(self, sub_id: str) -> Subscription:
        doc = await self.coll.find_one({"_id": sub_id})
        if doc is None:
            raise SubscriptionNotFound(sub_id)
        return from_doc(doc, Subscription, _malformed_sub)

    @translated
    async def list_for_tenant(self, tenant_id: str) -> list[Subscription]:
        out: list[Subscription] = []
        for doc in await self.coll.find({"tenant_id": tenant_id}).sort("_id", 1).to_list(None):
            try:
                out.append(from_doc(doc, Subscription, _malformed_sub))
            except MalformedDocument as exc:  # one bad subscription must not stall the tenant
                log.error("ignoring malformed subscription: %s", exc, extra={"tenant_id": tenant_id})
        return out

    @translated
    async def tenants(self) -> set[str]:
        return {str(t) for t in await self.coll.distinct("tenant_id", {"enabled": {"$ne": False}})}

    @translated
    async def put(self, sub: Subscription) -> None:
        check_id("tenant_id", sub.tenant_id)
        check_id("sub_id", sub.sub_id)
        await self.coll.replace_one({"_id": sub.sub_id}, {"_id": sub.sub_id, **to_doc(sub)},
                                    upsert=True)

    @translated
    async def delete(self, sub_id: str) -> None:
        await self.coll.delete_one({"_id": sub_id})


def _card_id(tenant_id: str, card_id: str) -> str:
    return f"{tenant_id}/{card_id}"


class MongoBoard:
    """``board_cards`` as a CardStore and a LabelStore."""

    def __init__(self, db: Any) -> None:
        self.coll = db[CARDS]

    @translated
    async def get(self, tenant_id: str, card_id: str) -> Card:
        doc = await self.coll.find_one({"_id": _card_id(tenant_id, card_id)})
        if doc is None:
            raise CardNotFound(tenant_id, card_id)
        return from_doc(doc, Card, MalformedCard)

    @translated
    async def get_many(
        self, tenant_id: str, card_ids: Collection[str]
    ) -> dict[str, Card | MalformedDocument]:
        if not card_ids:
            return {}
        keys = [_card_id(tenant_id, c) for c in card_ids]
        out: dict[str, Card | MalformedDocument] = {}
        for doc in await self.coll.find({"_id": {"$in": keys}}).to_list(None):
            cid = str(doc["_id"]).split("/", 1)[1]
            try:
                out[cid] = from_doc(doc, Card, MalformedCard)
            except MalformedDocument as exc:
                out[cid] = exc
        return out

    @translated
    async def put(self, card: Card) -> None:
        """Write the card's fields; the record of spent one-shots (``consumed``) is kept."""
        key = _card_id(card.tenant_id, card.card_id)
        await self.coll.update_one({"_id": key}, {"$set": to_doc(card)}, upsert=True)

    async def put_raw(self, tenant_id: str, card_id: str, doc: Mapping[str, Any]) -> None:
        key = _card_id(tenant_id, card_id)
        await self.coll.replace_one({"_id": key}, {**doc, "_id": key}, upsert=True)

    @translated
    async def delete(self, tenant_id: str, card_id: str) -> None:
        await self.coll.delete_one({"_id": _card_id(tenant_id, card_id)})

    @translated
    async def consume(
        self, tenant_id: str, card_id: str, labels: Sequence[str], by: str
    ) -> ConsumeOutcome:
        key = _card_id(tenant_id, card_id)
        # One write spends the labels AND records which row spent them: a retry of the same row
        # (after a crash or a lost lease) then knows the one-shot is its own.
        res = await self.coll.update_one(
            {"_id": key, "labels": {"$all": list(labels)}, "consumed.by": {"$ne": by}},
            {"$pullAll": {"labels": list(labels)},
             "$push": {"consumed": {"by": by, "labels": list(labels)}}},
        )
        if res.modified_count == 1:
            return "consumed"
        doc = await self.coll.find_one({"_id": key}, {"consumed": 1})
        if doc is None:
            raise CardNotFound(tenant_id, card_id)
        if any(rec.get("by") == by for rec in doc.get("consumed", [])):
            return "already"
        return "absent"


class MongoReadModelStore:
    def __init__(self, db: Any) -> None:
        self.coll = db[READ_MODELS]

    @staticmethod
    def _id(model: str, tenant_id: str, key: str) -> str:
        return f"{model}/{tenant_id}/{key}"

    @translated
    async def upsert_if_newer(
        self, model: str, tenant_id: str, key: str, seq: int, doc: Mapping[str, Any]
    ) -> bool:
        _id = self._id(model, tenant_id, key)
        try:
            await self.coll.update_one(
                {"_id": _id, "last_seq": {"$lt": seq}},
                {"$set": {**doc, "model": model, "tenant_id": tenant_id, "key": key,
                          "last_seq": seq}},
                upsert=True,
            )
        except DuplicateKeyError:
            return False  # a document with a newer (or the same) seq is already there
        return True

    @translated
    async def get(self, model: str, tenant_id: str, key: str) -> dict[str, Any] | None:
        return await self.coll.find_one({"_id": self._id(model, tenant_id, key)}, {"_id": 0, "model": 0})  # type: ignore[no-any-return]

    @translated
    async def list(self, model: str, tenant_id: str) -> list[dict[str, Any]]:
        cursor = self.coll.find({"model": model, "tenant_id": tenant_id}, {"_id": 0, "model": 0})
        return list(await cursor.sort("key", 1).to_list(None))

    @translated
    async def reset(self, model: str, tenant_id: str) -> int:
        res = await self.coll.delete_many({"model": model, "tenant_id": tenant_id})
        return int(res.deleted_count)
