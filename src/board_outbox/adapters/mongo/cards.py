"""``board_cards`` on MongoDB: cards, and the atomic one-shot label consume."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from board_outbox.adapters.mongo.errors import translated
from board_outbox.model.board import CONSUMED_CAP, Card
from board_outbox.model.codec import from_doc, to_doc
from board_outbox.model.errors import CardNotFound, MalformedCard, MalformedDocument
from board_outbox.ports import ConsumeOutcome

CARDS = "board_cards"


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
        # key -> card id, not a split on "/" (R2: a card id may carry the separator)
        keys = {_card_id(tenant_id, c): c for c in card_ids}
        out: dict[str, Card | MalformedDocument] = {}
        # the card's fields only (its record of spent one-shots, ``consumed``, stays on the
        # server), all in one reply (no getMore round trip; one card per key at most)
        found = (self.coll.find({"_id": {"$in": list(keys)}}, {"consumed": 0})
                 .limit(len(keys)).batch_size(len(keys)))
        for doc in await found.to_list(None):
            cid = keys.get(doc["_id"])
            if cid is None:
                continue
            try:
                card = from_doc(doc, Card, MalformedCard)
                if card.tenant_id != tenant_id or card.card_id != cid:
                    # "t/a" + "b" and "t" + "a/b" share a key: the document says whose it is
                    raise MalformedCard(doc["_id"], f"document names tenant {card.tenant_id!r} "
                                        f"card {card.card_id!r}")
                out[cid] = card
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
    async def forget_consumed(self, tenant_id: str, card_id: str, by: str) -> None:
        await self.coll.update_one({"_id": _card_id(tenant_id, card_id)},
                                   {"$pull": {"consumed": {"by": by}}})

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
             "$push": {"consumed": {"$each": [{"by": by, "labels": list(labels)}],
                                    "$slice": -CONSUMED_CAP}}},
        )
        if res.modified_count == 1:
            return "consumed"
        doc = await self.coll.find_one({"_id": key}, {"consumed": 1})
        if doc is None:
            raise CardNotFound(tenant_id, card_id)
        if any(rec.get("by") == by for rec in doc.get("consumed", [])):
            return "already"
        return "absent"
