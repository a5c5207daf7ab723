"""The demo's synthetic board: tenants, their subscriptions, and random but plausible activity."""

from __future__ import annotations

import random
import time

import msgspec

from board_outbox.model.board import Card
from board_outbox.model.errors import CardNotFound
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import Stores
from board_outbox.surface.demo.notify import KIND as NOTIFY

COLUMNS = ("inbox", "doing", "review", "done")


def demo_subscriptions(tenant: str) -> list[Subscription]:
    return [
        Subscription(
            sub_id=f"{tenant}.triage", tenant_id=tenant, bot="triage-bot",
            rule=MatchRule(event_types=("card.created",), column="inbox"),
        ),
        Subscription(
            sub_id=f"{tenant}.review", tenant_id=tenant, bot="review-bot",
            rule=MatchRule(event_types=("card.moved",), column="review"),
        ),
        Subscription(
            sub_id=f"{tenant}.ship", tenant_id=tenant, bot="ship-bot",
            rule=MatchRule(event_types=("card.labeled",)), consume_labels=("ship",),
        ),
        # a user effect kind (surface/demo/notify.py): the team channel hears of finished cards
        Subscription(
            sub_id=f"{tenant}.done", tenant_id=tenant, bot="#team", kind=NOTIFY,
            rule=MatchRule(event_types=("card.moved",), column="done"),
        ),
    ]


class BoardSimulator:
    """Plays random but plausible board activity and writes events through the event log, the
    way an upstream writer does: allocate the seq, then insert (on any backend)."""

    def __init__(self, stores: Stores, tenants: list[str], rng: random.Random) -> None:
        self.s = stores
        self.tenants = tenants
        self.rng = rng
        self.cards: dict[str, dict[str, Card]] = {t: {} for t in tenants}
        self.emitted = 0
        self._n = 0

    async def step(self) -> None:
        t = self.rng.choice(self.tenants)
        cards = self.cards[t]
        roll = self.rng.random()
        if not cards or roll < 0.25:
            self._n += 1
            card = Card(tenant_id=t, card_id=f"c{self._n}", title=f"card {self._n}", column="inbox")
            await self._write(card, "card.created")
            return
        card = cards[self.rng.choice(sorted(cards))]
        if roll < 0.55:
            col = self.rng.choice(COLUMNS)
            await self._write(msgspec.structs.replace(card, column=col), "card.moved")
        elif roll < 0.80:
            label = self.rng.choice(("ship", "bug", "ship"))
            labels = tuple(sorted({*card.labels, label}))
            await self._write(msgspec.structs.replace(card, labels=labels), "card.labeled")
        elif roll < 0.95:
            await self._write(msgspec.structs.replace(card, title=card.title + "!"), "card.updated")
        else:
            await self.s.cards.delete(t, card.card_id)
            del cards[card.card_id]
            await self._emit(t, "card.deleted", card.card_id)

    async def _write(self, card: Card, etype: str) -> None:
        # Labels may have been consumed by a bot meanwhile: the store is the truth.
        try:
            stored = await self.s.cards.get(card.tenant_id, card.card_id)
            if etype != "card.labeled":
                card = msgspec.structs.replace(card, labels=stored.labels)
        except CardNotFound:
            pass
        await self.s.cards.put(card)
        self.cards[card.tenant_id][card.card_id] = card
        await self._emit(card.tenant_id, etype, card.card_id)

    async def _emit(self, tenant: str, etype: str, card_id: str) -> None:
        seq = await self.s.events.allocate_seq(tenant)
        await self.s.events.insert(
            {"tenant_id": tenant, "seq": seq, "type": etype, "card_id": card_id, "at": time.time()})
        self.emitted += 1
