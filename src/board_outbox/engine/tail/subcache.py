"""The subscriptions a launch re-checks, cached while a change stream vouches for them.

The tail reads a tenant's subscriptions for every batch it matches, and the launch re-check
(M10b) read each claimed batch's subscriptions again: a second round trip on the short path,
moments after the first, for documents that change rarely. ``SubscriptionCache`` wraps the
``SubscriptionStore`` port:

- ``list_for_tenant`` (the tail's match) **always reads the store**: an event is matched against
  the subscriptions as they are when it is materialized, never against a cache that has not yet
  heard of a subscription created just before the event (which would lose its effect);
- what that read returned is kept, and ``get`` / ``get_many`` (the re-check) are served from it
  **only while the change stream is open**; any change to any subscription empties it, the
  stream ending or reopening empties it, and a read that was running while it was emptied is
  not kept (an epoch counter). The stream is the service's one stream (S6), which carries the
  subscriptions' writes beside the events' inserts: the waker calls ``opened``, ``changed`` and
  ``closed``;
- an id it does not hold reads through (a deleted subscription, a tenant not read lately), so
  every answer the store would give is given the same way.

So the re-check sees the subscription as the tail read it plus every change the stream has
delivered since: a change the stream has not delivered yet is indistinguishable from one
committed just after a re-check read, the race M10b always had. That delay is milliseconds on a
replica with nothing to do; on a busy one, whose stream is paced to its tail's passes (S6), it
is at most one pass, and never more than ``tail.stream_pace_seconds``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import SubscriptionStore

log = logging.getLogger("board_outbox.subscriptions")

MAX_TENANTS = 50_000  # tenants cached at once; past this the cache starts over


class SubscriptionCache:
    def __init__(self, store: SubscriptionStore, *, max_tenants: int = MAX_TENANTS) -> None:
        self.store = store
        self.max_tenants = max_tenants
        self.live = False  # the stream is open: cached answers may be served
        self._epoch = 0
        self._tenants: dict[str, int] = {}  # tenants read since the last reset: their count
        self._ids: dict[str, Subscription] = {}
        self.hits = 0
        self.reads = 0  # reads that went to the store
        self.resets = 0

    # -- the stream's side ----------------------------------------------------------------------

    def opened(self) -> None:
        self._reset()
        self.live = True

    def changed(self) -> None:
        self._reset()

    def closed(self) -> None:
        self.live = False
        self._reset()

    def _reset(self) -> None:
        self._epoch += 1
        self.resets += 1
        self._tenants.clear()
        self._ids.clear()

    # -- the SubscriptionStore port --------------------------------------------------------------

    async def list_for_tenant(self, tenant_id: str) -> list[Subscription]:
        epoch = self._epoch
        self.reads += 1
        subs = await self.store.list_for_tenant(tenant_id)
        if self.live and epoch == self._epoch:
            if len(self._tenants) >= self.max_tenants:
                self._reset()
            self._tenants[tenant_id] = len(subs)
            for sub in subs:
                self._ids[sub.sub_id] = sub
        return subs

    async def get_many(self, sub_ids: Collection[str]) -> dict[str, Subscription]:
        if not self.live:
            self.reads += 1
            return await self.store.get_many(sub_ids)
        found = {i: self._ids[i] for i in sub_ids if i in self._ids}
        rest = [i for i in sub_ids if i not in found]
        if rest:
            self.reads += 1
            found.update(await self.store.get_many(rest))
        else:
            self.hits += 1
        return found

    async def get(self, sub_id: str) -> Subscription:
        if self.live:
            sub = self._ids.get(sub_id)
            if sub is not None:
                self.hits += 1
                return sub
        self.reads += 1
        return await self.store.get(sub_id)

    async def tenants(self) -> set[str]:
        return await self.store.tenants()

    async def put(self, sub: Subscription) -> None:
        await self.store.put(sub)
        self._reset()  # our own write, before its change arrives

    async def delete(self, sub_id: str) -> None:
        await self.store.delete(sub_id)
        self._reset()
