"""In-memory ``trigger_subscriptions``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from anyio.lowlevel import checkpoint

from board_outbox.model.domain import Subscription, check_id, check_kind
from board_outbox.model.errors import MalformedDocument, SubscriptionNotFound
from board_outbox.model.validation import OnceLog, subscription_problem

log = logging.getLogger("board_outbox.memory")
_once = OnceLog(log)


class MemorySubscriptionStore:
    def __init__(self) -> None:
        self._subs: dict[str, Subscription] = {}
        self._by_tenant: dict[str, dict[str, Subscription]] = {}
        # called at every put and delete: the change feed's twin (``MemoryBackend`` hooks its
        # event log's ``subscription_changed`` here, as the Mongo stream carries both)
        self.listeners: list[Callable[[], None]] = []

    def _change(self) -> None:
        for listener in self.listeners:
            listener()

    async def get(self, sub_id: str) -> Subscription:
        await checkpoint()
        try:
            sub = self._subs[sub_id]
        except KeyError:
            raise SubscriptionNotFound(sub_id) from None
        problem = subscription_problem(sub)
        if problem is not None:  # as the Mongo adapter
            raise MalformedDocument("subscription", sub_id, problem)
        return sub

    async def list_for_tenant(self, tenant_id: str) -> list[Subscription]:
        await checkpoint()
        out = []
        for sub in self._by_tenant.get(tenant_id, {}).values():
            problem = subscription_problem(sub)
            if problem is None:
                out.append(sub)
            else:
                _once(("sub", sub.sub_id, problem), logging.ERROR,
                      "ignoring malformed subscription: %s", problem, extra={"tenant_id": tenant_id})
        return out

    async def get_many(self, sub_ids: Collection[str]) -> dict[str, Subscription]:
        await checkpoint()
        return {i: self._subs[i] for i in sub_ids if i in self._subs}

    async def tenants(self) -> set[str]:
        await checkpoint()
        return {s.tenant_id for s in self._subs.values() if s.enabled}

    async def put(self, sub: Subscription) -> None:
        await checkpoint()
        check_id("tenant_id", sub.tenant_id)
        check_id("sub_id", sub.sub_id)
        check_kind(sub.kind)
        old = self._subs.get(sub.sub_id)
        if old is not None:
            self._by_tenant[old.tenant_id].pop(sub.sub_id, None)
        self._subs[sub.sub_id] = sub
        self._by_tenant.setdefault(sub.tenant_id, {})[sub.sub_id] = sub
        self._change()

    async def delete(self, sub_id: str) -> None:
        await checkpoint()
        old = self._subs.pop(sub_id, None)
        if old is not None:
            self._by_tenant[old.tenant_id].pop(sub_id, None)
            self._change()
