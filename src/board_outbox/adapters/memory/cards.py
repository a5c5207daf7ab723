"""In-memory ``board_cards``: cards, and the atomic one-shot label consume."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from anyio.lowlevel import checkpoint

from board_outbox.model.board import CONSUMED_CAP, Card
from board_outbox.model.codec import from_doc, to_doc
from board_outbox.model.errors import CardNotFound, MalformedCard, MalformedDocument
from board_outbox.ports import ConsumeOutcome


class MemoryBoard:
    """Cards, as a ``CardStore`` and a ``LabelStore`` (labels live on the card)."""

    def __init__(self) -> None:
        self._cards: dict[tuple[str, str], dict[str, Any]] = {}
        self.consumed: list[tuple[str, str, tuple[str, ...]]] = []

    def put_raw(self, tenant_id: str, card_id: str, doc: dict[str, Any]) -> None:
        self._cards[(tenant_id, card_id)] = doc

    async def get(self, tenant_id: str, card_id: str) -> Card:
        await checkpoint()
        doc = self._cards.get((tenant_id, card_id))
        if doc is None:
            raise CardNotFound(tenant_id, card_id)
        return from_doc(doc, Card, MalformedCard)

    async def get_many(
        self, tenant_id: str, card_ids: Collection[str]
    ) -> dict[str, Card | MalformedDocument]:
        await checkpoint()
        out: dict[str, Card | MalformedDocument] = {}
        for cid in card_ids:
            doc = self._cards.get((tenant_id, cid))
            if doc is not None:
                try:
                    out[cid] = from_doc(doc, Card, MalformedCard)
                except MalformedDocument as exc:
                    out[cid] = exc
        return out

    async def put(self, card: Card) -> None:
        """Write the card's fields; the record of spent one-shots (``consumed``) is kept."""
        await checkpoint()
        key = (card.tenant_id, card.card_id)
        old = self._cards.get(key, {})
        self._cards[key] = {**to_doc(card), "consumed": old.get("consumed", [])}

    async def delete(self, tenant_id: str, card_id: str) -> None:
        await checkpoint()
        self._cards.pop((tenant_id, card_id), None)

    async def forget_consumed(self, tenant_id: str, card_id: str, by: str) -> None:
        await checkpoint()
        doc = self._cards.get((tenant_id, card_id))
        if doc is not None and "consumed" in doc:
            doc["consumed"] = [rec for rec in doc["consumed"] if rec.get("by") != by]

    async def consume(
        self, tenant_id: str, card_id: str, labels: Sequence[str], by: str
    ) -> ConsumeOutcome:
        await checkpoint()
        doc = self._cards.get((tenant_id, card_id))
        if doc is None:
            raise CardNotFound(tenant_id, card_id)
        spent = doc.setdefault("consumed", [])
        if any(rec.get("by") == by for rec in spent):
            return "already"
        have = list(doc.get("labels", []))
        if not set(labels).issubset(have):
            return "absent"
        doc["labels"] = [label for label in have if label not in labels]
        spent.append({"by": by, "labels": list(labels)})
        del spent[:-CONSUMED_CAP]
        self.consumed.append((tenant_id, card_id, tuple(labels)))
        return "consumed"
