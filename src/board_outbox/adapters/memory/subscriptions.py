"""In-memory ``trigger_subscriptions``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from anyio.lowlevel import checkpoint

from board_outbox.model.bad_documents import OnceLog
from board_outbox.model.errors import MalformedDocument, SubscriptionNotFound
from board_outbox.model.ids import check_id, check_kind
from board_outbox.model.rows import AuditEntry
from board_outbox.model.subscription_records import AUDIT_KEEP, SubscriptionRecord
from board_outbox.model.subscriptions import Subscription
from board_outbox.model.validation import subscription_problem

log = logging.getLogger("board_outbox.memory")
_once = OnceLog(log)


class MemorySubscriptionStore:
    def __init__(self) -> None:
        self._subs: dict[str, Subscription] = {}
        self._by_tenant: dict[str, dict[str, Subscription]] = {}
        # called at every put and delete: the change feed's twin (``MemoryBackend`` hooks its
        # event log's ``subscription_changed`` here, as the Mongo stream carries both)
        self.listeners: list[Callable[[], None]] = []
        # the operators' writes (P6): each subscription's audit and revision
        self._audit: dict[str, list[AuditEntry]] = {}
        self._rev: dict[str, int] = {}

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

    # --- the operators' management (``SubscriptionAdmin``, P6) -----------------------------

    def _record(self, sub: Subscription) -> SubscriptionRecord:
        problem = subscription_problem(sub)
        return SubscriptionRecord(sub_id=sub.sub_id, sub=None if problem else sub,
                                  problem=problem, tenant_id=sub.tenant_id,
                                  audit=list(self._audit.get(sub.sub_id, [])),
                                  rev=self._rev.get(sub.sub_id, 0))

    async def records(self, tenant_id: str | None = None,
                      limit: int = 1000) -> list[SubscriptionRecord]:
        await checkpoint()
        subs = self._subs.values() if tenant_id is None else \
            self._by_tenant.get(tenant_id, {}).values()
        return [self._record(s) for s in sorted(subs, key=lambda s: s.sub_id)][:limit]

    async def record(self, sub_id: str) -> SubscriptionRecord | None:
        await checkpoint()
        sub = self._subs.get(sub_id)
        return None if sub is None else self._record(sub)

    async def create(self, sub: Subscription, entry: AuditEntry) -> bool:
        if sub.sub_id in self._subs:
            await checkpoint()
            return False
        await self.put(sub)
        self._audit[sub.sub_id] = [entry]
        self._rev[sub.sub_id] = 1
        return True

    async def update(self, sub: Subscription, entry: AuditEntry, rev: int,
                     ref: object = None) -> bool:
        if sub.sub_id not in self._subs or self._rev.get(sub.sub_id, 0) != rev:
            await checkpoint()
            return False
        await self.put(sub)
        self._audit[sub.sub_id] = [*self._audit.get(sub.sub_id, []), entry][-AUDIT_KEEP:]
        self._rev[sub.sub_id] = rev + 1
        return True

    async def remove(self, sub_id: str, rev: int, ref: object = None) -> bool:
        if sub_id not in self._subs or self._rev.get(sub_id, 0) != rev:
            await checkpoint()
            return False
        await self.delete(sub_id)
        self._audit.pop(sub_id, None)
        self._rev.pop(sub_id, None)
        return True
