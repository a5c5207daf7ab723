"""Decode a stored board event and normalize it against the card it names.

Three outcomes, never collapsed (ADR-094 consequence 1):
- an ``EventSnapshot``: materialize it;
- ``CardNotFound``: the card is definitively deleted, skip the event;
- ``StoreUnavailable``: the store is failing; abort the batch before the cursor moves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .domain import BoardEvent, Card, EventSnapshot, from_doc
from .errors import CardNotFound, MalformedDocument, MalformedEvent
from .ports import CardStore, EventRecord

DELETED_TYPES = frozenset({"card.deleted"})


def decode_event(tenant_id: str, rec: EventRecord) -> BoardEvent:
    ev = from_doc(rec.doc, BoardEvent, MalformedEvent)
    if ev.tenant_id != tenant_id or ev.seq != rec.seq:
        raise MalformedEvent(rec.seq, f"document says tenant {ev.tenant_id!r} seq {ev.seq}")
    if not ev.type or not ev.card_id:
        raise MalformedEvent(rec.seq, "empty type or card_id")
    return ev


def snapshot(ev: BoardEvent, cards: Mapping[str, Card | MalformedDocument]) -> EventSnapshot:
    """Normalize against a batch of cards fetched in one round trip (``CardStore.get_many``)."""
    if ev.type in DELETED_TYPES:
        return EventSnapshot(seq=ev.seq, type=ev.type, card_id=ev.card_id, at=ev.at, deleted=True)
    card = cards.get(ev.card_id)
    if card is None:
        raise CardNotFound(ev.tenant_id, ev.card_id)
    if isinstance(card, MalformedDocument):
        raise card
    return EventSnapshot(
        seq=ev.seq, type=ev.type, card_id=ev.card_id, at=ev.at,
        title=card.title, column=card.column, labels=card.labels,
    )


def card_ids(events: Iterable[BoardEvent]) -> set[str]:
    return {ev.card_id for ev in events if ev.type not in DELETED_TYPES}


async def normalize(cards: CardStore, ev: BoardEvent) -> EventSnapshot:
    if ev.type in DELETED_TYPES:
        return EventSnapshot(seq=ev.seq, type=ev.type, card_id=ev.card_id, at=ev.at, deleted=True)
    card = await cards.get(ev.tenant_id, ev.card_id)  # CardNotFound / StoreUnavailable propagate
    return EventSnapshot(
        seq=ev.seq,
        type=ev.type,
        card_id=ev.card_id,
        at=ev.at,
        title=card.title,
        column=card.column,
        labels=card.labels,
    )
