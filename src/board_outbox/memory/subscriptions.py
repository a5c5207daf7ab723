"""In-memory ``trigger_subscriptions``."""

from __future__ import annotations

from anyio.lowlevel import checkpoint

from ..domain import Subscription, check_id
from ..errors import SubscriptionNotFound


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
