"""The board the handlers read and touch: its cards, and the one-shot labels a launch spends."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from board_outbox.model.board import Card
from board_outbox.model.errors import MalformedDocument
from board_outbox.ports.values import ConsumeOutcome

__all__ = ["CardStore", "LabelStore"]


class CardStore(Protocol):
    async def get(self, tenant_id: str, card_id: str) -> Card:
        """Raises ``CardNotFound`` (definitive), ``MalformedCard`` or ``StoreUnavailable``."""
        ...

    async def get_many(
        self, tenant_id: str, card_ids: Collection[str]
    ) -> dict[str, Card | MalformedDocument]:
        """One round trip for a batch: found cards (or the decode error of a malformed one);
        a card id missing from the result is definitively deleted."""
        ...

    async def put(self, card: Card) -> None: ...

    async def delete(self, tenant_id: str, card_id: str) -> None: ...


class LabelStore(Protocol):
    async def consume(
        self, tenant_id: str, card_id: str, labels: Sequence[str], by: str
    ) -> ConsumeOutcome:
        """Spend a one-shot: atomically remove ``labels`` from the card iff it carries all of
        them, recording on the card that row ``by`` spent them (same write). Idempotent per row:
        ``"consumed"`` now; ``"already"`` -- spent earlier by this same row (a retry after a crash
        or a lost lease: launch, do not consume again); ``"absent"`` -- not there and not spent by
        this row (skip). Raises ``CardNotFound``."""
        ...

    async def forget_consumed(self, tenant_id: str, card_id: str, by: str) -> None:
        """Drop row ``by``'s entry from the card's ``consumed`` record. Called once the row's
        ``consume_marked`` is durable: from then on no retry of it asks ``consume`` again, so the
        entry is dead weight. (The record is also capped at ``CONSUMED_CAP`` newest entries.)"""
        ...
