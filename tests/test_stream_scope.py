"""S5: each replica's change stream delivers only the tenants it owns (the others' inserts are
left out in the store, by the pipeline's ``$match``), and a membership change reopens it from
its token without losing an event. Two services in one process, on the memory twins and on the
wire; the poll interval is long, so only the stream and the polls the runtime asks for itself
(at start, on a membership change, when a reopened stream delivers) can find the events."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.engine.flow.membership import owner
from board_outbox.model.domain import Card, Subscription
from board_outbox.ports import Stores
from board_outbox.service.config import load_config
from board_outbox.service.config_sections import Config
from board_outbox.service.runtime import Service

pytestmark = pytest.mark.anyio

TENANTS = [f"t{i}" for i in range(8)]
TIMEOUT = 1.2  # membership.heartbeat_timeout_seconds: a beat every 0.2 s


async def eventually(cond: Callable[[], Awaitable[bool] | bool], timeout: float = 20.0) -> None:
    with anyio.fail_after(timeout):
        while True:
            got = cond()
            if not isinstance(got, bool):
                got = await got
            if got:
                return
            await anyio.sleep(0.02)


def config(name: str) -> Config:
    return load_config(env={}, projections=[], service={"replica_name": name},  # type: ignore[arg-type]
                       tail={"poll_interval_seconds": 60, "seed": "earliest"},
                       membership={"heartbeat_timeout_seconds": TIMEOUT})


class World:
    """Seeding and emitting through the ports, whatever the backend."""

    def __init__(self, stores: Stores) -> None:
        self.stores = stores
        self.emitted = 0

    async def seed(self) -> None:
        for t in TENANTS:
            await self.stores.subs.put(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="b"))
            await self.stores.cards.put(Card(tenant_id=t, card_id="c"))  # type: ignore[attr-defined]
            await self.emit(t)  # every tenant has a counter before the services start

    async def emit(self, tenant: str) -> None:
        seq = await self.stores.events.allocate_seq(tenant)
        await self.stores.events.insert(  # type: ignore[attr-defined]
            {"tenant_id": tenant, "seq": seq, "type": "card.created", "card_id": "c", "at": 0.0})
        self.emitted += 1

    async def launched(self) -> int:
        counts = await self.stores.outbox.count_by_state()
        return counts.get("done", 0)


async def settled(services: list[Service]) -> None:
    """Every view agrees on the members and every open stream leaves out the others' tenants."""
    def ok() -> bool:
        members = {s.ownership.members for s in services}
        if len(members) != 1 or len(next(iter(members))) != len(services):
            return False
        return all(s.stream_excluding == s.stream_exclude == s.ownership.others(TENANTS)
                   for s in services)
    await eventually(ok)


async def scenario(stores_for: Callable[[str], Stores], cfg: Callable[[str], Config]) -> None:
    world = World(stores_for("seed"))
    await world.seed()
    a = Service(stores_for("a"), cfg("a"), rng=random.Random(1))
    b = Service(stores_for("b"), cfg("b"), rng=random.Random(2))
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.run)
        tg.start_soon(b.run)
        await settled([a, b])
        await eventually(lambda: _done(world, len(TENANTS)))
        await settled([a, b])  # again: a heartbeat that timed out meanwhile (a loaded machine)
        mine = {s: [t for t in TENANTS if owner(s.ownership.members, t) == s.ownership.member_id]
                for s in (a, b)}
        assert mine[a] and mine[b] and set(mine[a]).isdisjoint(mine[b])
        before = {s: s.stats.stream_events for s in (a, b)}
        for _ in range(3):
            for t in TENANTS:
                await world.emit(t)
        await eventually(lambda: _done(world, world.emitted))
        # each stream received exactly its own tenants' inserts, nothing of the other's
        for s in (a, b):
            assert s.stats.stream_events - before[s] == 3 * len(mine[s])
            assert s.stats.stream_wakes >= 1

        # b leaves: a's view changes, its stream reopens from its token leaving nothing out
        rescopes = a.stats.stream_rescopes
        b.stop()
        for t in mine[b]:  # inserted while a's stream still leaves b's tenants out
            await world.emit(t)
        await eventually(lambda: a.ownership.members == (a.ownership.member_id,))
        await eventually(lambda: a.stream_excluding == frozenset())
        assert a.stats.stream_rescopes > rescopes
        for t in TENANTS:  # delivered by the reopened stream
            await world.emit(t)
        await eventually(lambda: _done(world, world.emitted))
        seen = a.stats.stream_events
        await world.emit(mine[b][0])
        await eventually(lambda: a.stats.stream_events == seen + 1)
        await eventually(lambda: _done(world, world.emitted))
        a.stop()
    assert await world.launched() == world.emitted  # nothing lost; no row twice (one per key)
    # the events_materialized counter, summed over replicas, counts each event once (a batch
    # both raced on is counted by the replica whose cursor CAS won)
    assert a.stats.events_passed + b.stats.events_passed == world.emitted


async def _done(world: World, n: int) -> bool:
    return await world.launched() == n


async def test_each_stream_delivers_only_its_tenants_memory() -> None:
    backend = MemoryBackend()
    backend.events.quiet_seconds = 0.2
    await scenario(lambda _name: backend.stores(), lambda name: config(name))


@pytest.mark.live_mongo
async def test_each_stream_delivers_only_its_tenants_on_the_wire(live_db: Any) -> None:
    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo.client import mongo_stores

    await scenario(lambda _name: mongo_stores(live_db, MemoryLauncher()), lambda name: config(name))


async def test_the_first_stream_is_scoped_by_the_tenants_known_at_start() -> None:
    """Tenants with a subscription but no event yet are known at start (the preflight's tenant
    list), so a replica that finds another member at its first heartbeat opens its first
    stream already leaving out that member's tenants: no poll has a counter to see them by,
    and before, every replica's stream woke for each of them."""
    import time

    backend = MemoryBackend()
    stores = backend.stores()
    for t in TENANTS:  # subscriptions only: no counter, no event
        await stores.subs.put(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="b"))
    other = "other:1"
    await backend.members.heartbeat(other, time.time(), 60.0)  # beats for a minute
    cfg = load_config(env={}, projections=[], service={"replica_name": "first"},  # type: ignore[arg-type]
                      tail={"poll_interval_seconds": 60, "seed": "earliest"},
                      membership={"heartbeat_timeout_seconds": 90})
    service = Service(stores, cfg, rng=random.Random(1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await eventually(lambda: service.stream_excluding == service.stream_exclude
                         and service.stream_open)
        assert set(service.ownership.members) == {other, service.ownership.member_id}
        theirs = {t for t in TENANTS if owner(service.ownership.members, t) == other}
        assert theirs and service.stream_exclude == theirs
        service.stop()
