"""In-memory subscriptions, cards (with atomic label consume), launcher and projection store."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Sequence
from typing import Any

from anyio.lowlevel import checkpoint

from ..domain import Card, Subscription, check_id, from_doc, to_doc
from ..errors import (
    CardNotFound,
    LaunchFailed,
    MalformedCard,
    MalformedDocument,
    SubscriptionNotFound,
)
from ..faults import FaultInjector
from ..ports import ConsumeOutcome, LaunchRequest


class MemorySubscriptionStore:
    def __init__(self) -> None:
        self._subs: dict[str, Subscription] = {}
        self._by_tenant: dict[str, dict[str, Subscription]] = {}

    async def get(self, sub_id: str) -> Subscription:
        await checkpoint()
        try:
            return self._subs[sub_id]
        except KeyError:
            raise SubscriptionNotFound(sub_id) from None

    async def list_for_tenant(self, tenant_id: str) -> list[Subscription]:
        await checkpoint()
        return list(self._by_tenant.get(tenant_id, {}).values())

    async def tenants(self) -> set[str]:
        await checkpoint()
        return {s.tenant_id for s in self._subs.values() if s.enabled}

    async def put(self, sub: Subscription) -> None:
        await checkpoint()
        check_id("tenant_id", sub.tenant_id)
        check_id("sub_id", sub.sub_id)
        old = self._subs.get(sub.sub_id)
        if old is not None:
            self._by_tenant[old.tenant_id].pop(sub.sub_id, None)
        self._subs[sub.sub_id] = sub
        self._by_tenant.setdefault(sub.tenant_id, {})[sub.sub_id] = sub

    async def delete(self, sub_id: str) -> None:
        await checkpoint()
        old = self._subs.pop(sub_id, None)
        if old is not None:
            self._by_tenant[old.tenant_id].pop(sub_id, None)


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
        self.consumed.append((tenant_id, card_id, tuple(labels)))
        return "consumed"


class MemoryLauncher:
    """Records launches. ``fail`` decides per request whether this launch attempt fails."""

    def __init__(
        self,
        faults: FaultInjector | None = None,
        fail: Callable[[LaunchRequest], bool] | None = None,
    ) -> None:
        self.faults = faults or FaultInjector()
        self.fail = fail
        self.launches: list[LaunchRequest] = []
        self.attempts = 0
        self._ids = itertools.count(1)

    async def launch(self, req: LaunchRequest) -> str:
        await checkpoint()
        self.attempts += 1
        self.faults.hit("launcher.launch")
        if self.fail is not None and self.fail(req):
            raise LaunchFailed(f"launcher refused {req.bot} for {req.row_key}")
        self.launches.append(req)
        self.faults.hit("launcher.launch.after")
        return f"launch-{next(self._ids)}"
