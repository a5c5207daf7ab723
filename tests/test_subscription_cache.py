"""Issue 31: the launch re-check (M10b) served from the subscriptions the tail just read, kept
only while the change stream is open and emptied by any change. The cache's rules, the waker
driving it from the service's one stream (which carries the subscriptions' writes beside the
events' inserts, S6) and surviving the stream failing, and the same on the wire: a subscription
deleted behind the cache's back (another client) is seen by the next re-check once the stream
delivers it."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.adapters.memory.subscriptions import MemorySubscriptionStore
from board_outbox.engine.tail.subcache import SubscriptionCache
from board_outbox.model.errors import StoreUnavailable, SubscriptionNotFound
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import Change, Stores, SubscriptionStore
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from tests.test_stream_scope import eventually
from tests.test_tail_roundtrips import Counting

pytestmark = pytest.mark.anyio
T = "t1"


def sub(i: int, tenant: str = T) -> Subscription:
    return Subscription(sub_id=f"s{i}", tenant_id=tenant, bot="b")


async def cached(store: SubscriptionStore) -> tuple[SubscriptionCache, dict[str, int]]:
    calls: dict[str, int] = {}
    cache = SubscriptionCache(Counting(store, calls))  # type: ignore[arg-type]
    return cache, calls


async def test_the_recheck_is_served_from_the_tails_read_while_the_stream_is_open() -> None:
    store = MemorySubscriptionStore()
    await store.put(sub(1))
    await store.put(sub(2))
    cache, calls = await cached(store)
    # closed: everything reads through, nothing is kept
    assert set(await cache.get_many({"s1"})) == {"s1"} and calls["get_many"] == 1
    cache.opened()
    assert [s.sub_id for s in await cache.list_for_tenant(T)] == ["s1", "s2"]
    assert [s.sub_id for s in await cache.list_for_tenant(T)] == ["s1", "s2"]
    assert calls["list_for_tenant"] == 2  # the tail's match always reads the store
    got = await cache.get_many({"s1", "s2"})
    assert set(got) == {"s1", "s2"} and calls["get_many"] == 1  # served: no read
    assert (await cache.get("s2")).sub_id == "s2" and "get" not in calls
    # an id it does not hold reads through, and a deleted one stays missing
    assert await cache.get_many({"s1", "gone"}) == {"s1": sub(1)} and calls["get_many"] == 2
    with pytest.raises(SubscriptionNotFound):
        await cache.get("gone")


async def test_any_change_or_the_stream_ending_empties_the_cache() -> None:
    store = MemorySubscriptionStore()
    await store.put(sub(1))
    cache, calls = await cached(store)
    cache.opened()
    await cache.list_for_tenant(T)
    await store.delete("s1")  # behind the cache's back: the stream says so
    cache.changed()
    assert await cache.get_many({"s1"}) == {} and calls["get_many"] == 1
    await store.put(sub(1))
    await cache.list_for_tenant(T)
    cache.closed()
    await cache.get_many({"s1"})
    assert calls["get_many"] == 2  # closed: read through
    await cache.list_for_tenant(T)
    await cache.get_many({"s1"})
    assert calls["get_many"] == 3  # and nothing read while closed was kept


async def test_a_read_overtaken_by_a_change_is_not_kept() -> None:
    store = MemorySubscriptionStore()
    await store.put(sub(1))
    cache = SubscriptionCache(store)
    cache.opened()
    real = store.list_for_tenant

    async def slow(tenant_id: str) -> list[Subscription]:
        got = await real(tenant_id)
        cache.changed()  # a change delivered while the read was on the wire
        return got

    store.list_for_tenant = slow  # type: ignore[method-assign]
    await cache.list_for_tenant(T)
    await store.delete("s1")
    assert await cache.get_many({"s1"}) == {}  # the overtaken read was not kept


async def test_our_own_writes_empty_the_cache() -> None:
    store = MemorySubscriptionStore()
    await store.put(sub(1))
    cache = SubscriptionCache(store)
    cache.opened()
    await cache.list_for_tenant(T)
    edited = Subscription(sub_id="s1", tenant_id=T, bot="other")
    await cache.put(edited)  # before its change arrives, the re-check sees it
    assert await cache.get_many({"s1"}) == {"s1": edited} and await cache.get("s1") == edited
    await cache.list_for_tenant(T)
    await cache.delete("s1")
    assert await cache.get_many({"s1"}) == {}


async def test_the_cache_holds_at_most_its_tenants_then_starts_over() -> None:
    store = MemorySubscriptionStore()
    for i, tenant in enumerate(("a", "b", "c")):
        await store.put(sub(i, tenant))
    cache, calls = await cached(store)
    cache.opened()
    cache.max_tenants = 2
    await cache.list_for_tenant("a")
    await cache.list_for_tenant("b")
    assert set(await cache.get_many({"s0", "s1"})) == {"s0", "s1"} and "get_many" not in calls
    resets = cache.resets
    await cache.list_for_tenant("c")  # a third tenant: the cache starts over with it alone
    assert cache.resets == resets + 1
    assert set(await cache.get_many({"s2"})) == {"s2"} and "get_many" not in calls
    assert set(await cache.get_many({"s0"})) == {"s0"} and calls.get("get_many", 0) == 1  # read


class Flaky:
    """A change feed whose every stream opens, delivers one write to the subscriptions, then
    fails; ``opens`` counts its opens, ``live`` what the cache was at each change."""

    def __init__(self, cache: Any) -> None:
        self.opens = 0
        self.cache = cache
        self.live: list[bool] = []

    async def watch(self, resume_token: Any, *, exclude: Any = (),
                    pace: Any = None) -> AsyncGenerator[Change, None]:
        self.opens += 1
        yield Change("", 0, None)  # established
        self.live.append(self.cache().live)
        yield Change("", 0, None, subscriptions=True)
        raise StoreUnavailable("stream interrupted")

    async def history_start(self) -> float | None:
        return None


def service_on(stores: Stores) -> Service:
    cfg = load_config(env={}, projections=[],  # type: ignore[arg-type]
                      tail={"poll_interval_seconds": 60, "seed": "earliest"})
    return Service(stores, cfg, rng=random.Random(1))


async def test_the_waker_outlives_its_stream_and_the_cache_serves_nothing_while_down() -> None:
    """The one stream carries the subscriptions' writes (S6): it opens the cache, each write
    empties it, and the stream failing closes it until the reopened stream is established."""
    holder: list[Service] = []
    feed = Flaky(lambda: holder[0].subscriptions)
    service = service_on(dataclasses.replace(MemoryBackend().stores(), feed=feed))
    holder.append(service)
    cache = service.subscriptions
    assert cache is not None
    async with anyio.create_task_group() as tg:
        tg.start_soon(service._waker_loop)
        await eventually(lambda: feed.opens >= 3)
        tg.cancel_scope.cancel()
    assert feed.live[:3] == [True, True, True]  # live once each stream is established
    assert service.stats.subscription_changes >= 2 and cache.resets >= 6
    assert not cache.live  # the stream is down: nothing vouches for the cache


async def follows(stores: Stores, other: SubscriptionStore) -> None:
    """``other`` is another client of the same store: its writes reach the service's cache only
    by the service's one change stream."""
    service = service_on(stores)
    cache = service.subscriptions
    assert cache is not None
    async with anyio.create_task_group() as tg:
        tg.start_soon(service._waker_loop)
        await eventually(lambda: cache.live)
        await cache.list_for_tenant(T)
        resets = cache.resets
        assert "s1" in await cache.get_many({"s1"}) and cache.hits == 1
        await other.delete("s1")
        await eventually(lambda: cache.resets > resets)
        assert await cache.get_many({"s1"}) == {}  # seen by the re-check
        await other.put(sub(1))
        await eventually(lambda: cache.resets > resets + 1)
        assert service.stats.subscription_changes == 2 and service.stats.stream_events == 0
        tg.cancel_scope.cancel()


async def test_the_memory_twin_follows_puts_and_deletes() -> None:
    backend = MemoryBackend()
    await backend.subs.put(sub(1))
    await follows(backend.stores(), backend.subs)


@pytest.mark.live_mongo
async def test_the_stream_follows_another_clients_writes_on_the_wire(live_db: Any) -> None:
    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo.client import mongo_stores
    from board_outbox.adapters.mongo.subscriptions import MongoSubscriptionStore

    store = MongoSubscriptionStore(live_db)
    await store.put(sub(1))
    await follows(mongo_stores(live_db, MemoryLauncher()), MongoSubscriptionStore(live_db))


class Reopens:
    """A change feed whose streams each open, deliver one insert (a position), then wait; the
    tokens each open was given are kept."""

    def __init__(self) -> None:
        self.tokens: list[Any] = []
        self.more = anyio.Event()

    async def watch(self, resume_token: Any, *, exclude: Any = (),
                    pace: Any = None) -> AsyncGenerator[Change, None]:
        self.tokens.append(resume_token)
        n = len(self.tokens)
        yield Change("", 0, None)
        yield Change(T, n, f"tok{n}")
        await self.more.wait()
        yield Change(T, 10 + n, f"tok{10 + n}")
        await anyio.sleep_forever()

    async def history_start(self) -> float | None:
        return None


async def test_a_rescoped_stream_keeps_the_cache_it_resumes_from_its_token() -> None:
    """A rescope (S5) reopens the stream from the token reached: no write to the subscriptions
    can fall between the two streams, so the cache is neither closed nor emptied by it."""
    feed = Reopens()
    service = service_on(dataclasses.replace(MemoryBackend().stores(), feed=feed))
    cache = service.subscriptions
    assert cache is not None
    async with anyio.create_task_group() as tg:
        tg.start_soon(service._waker_loop)
        await eventually(lambda: len(feed.tokens) == 1 and cache.live)
        await eventually(lambda: service.resume.token == "tok1")
        resets = cache.resets
        service.stream_exclude = frozenset({"other"})  # a new scope: the waker reopens
        feed.more.set()  # at the stream's next change
        await eventually(lambda: len(feed.tokens) == 2 and service.stats.stream_rescopes == 1)
        assert feed.tokens[1] == "tok11" and cache.live and cache.resets == resets
        tg.cancel_scope.cancel()
