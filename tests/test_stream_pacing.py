"""S6: a replica's one change stream is read at the pace of its busy tail, and its poll
net stretches while the stream is open -- without a tenant waiting longer than before.

- ``pace_stream`` (awaited by the feed before each getMore): an idle tail reads at once; a busy
  one holds the next getMore until a drain pass has begun since the last one went out, at most
  ``tail.stream_pace_seconds``;
- on the wire, a replica draining a backlog sends far fewer stream getMores than the server
  wakes its stream (this server wakes every stream at every write): about one per drain pass;
- the poll net runs every ``stream_poll_interval_seconds`` while the stream is open and every
  ``poll_interval_seconds`` as soon as it closes; a tenant whose drain stopped short (a store
  error) is drained again after ``poll_interval_seconds`` all the same.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.model.errors import StoreUnavailable
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import Stores
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from tests.support.faults import FaultInjector

pytestmark = pytest.mark.anyio
T = "t1"


async def eventually(cond: Callable[[], Awaitable[bool] | bool], timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while True:
            got = cond()
            if got if isinstance(got, bool) else await got:
                return
            await anyio.sleep(0.01)


async def seeded(stores: Stores, tenants: list[str]) -> None:
    for t in tenants:
        await stores.subs.put(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="b"))
        await stores.cards.put(Card(tenant_id=t, card_id="c"))  # type: ignore[attr-defined]


def service_on(stores: Stores, **tail: Any) -> Service:
    cfg = load_config(env={}, projections=[],  # type: ignore[arg-type]
                      tail={"seed": "earliest", **tail}, worker={"idle_seconds": 0.02})
    return Service(stores, cfg, rng=random.Random(1))


async def test_an_idle_tail_reads_its_stream_at_once_a_busy_one_once_per_pass() -> None:
    service = service_on(MemoryBackend().stores(), stream_pace_seconds=5)
    with anyio.fail_after(1):
        await service.pace_stream()  # idle: no wait
        await service.pace_stream()
    assert service.stats.stream_paced == 0
    service.wake_tenant(T)  # busy: a pass is due
    waited = False

    async def begin_pass() -> None:
        nonlocal waited
        await anyio.sleep(0.2)
        waited = True
        await service.drain_pass(False)  # the pass begins: the held getMore goes out

    async with anyio.create_task_group() as tg:
        tg.start_soon(begin_pass)
        with anyio.fail_after(2):
            await service.pace_stream()
        assert waited  # held until the pass began, not the 5 s cap
    assert service.stats.stream_paced == 1
    service.wake_tenant(T)
    service._passes += 1  # a pass began since the last read went out: read at once
    with anyio.fail_after(1):
        await service.pace_stream()
    assert service.stats.stream_paced == 1


async def test_a_busy_tail_holds_its_stream_at_most_the_pace() -> None:
    service = service_on(MemoryBackend().stores(), stream_pace_seconds=0.1)
    await service.pace_stream()
    service.wake_tenant(T)  # busy, and no pass ever begins
    t0 = anyio.current_time()
    with anyio.fail_after(2):
        await service.pace_stream()
    assert 0.08 <= anyio.current_time() - t0 < 1.0


@pytest.mark.live_mongo
async def test_a_busy_replica_reads_its_stream_once_a_pass_on_the_wire(live_uri: str) -> None:
    """This server ends a stream's wait at any write, so an unpaced replica sends a getMore per
    write of its own: several per drain pass (rows, cursor, marks). Paced, while its tail is busy
    it sends at most one per pass begun."""
    from pymongo import AsyncMongoClient, monitoring

    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo import ensure_schema, mongo_stores

    holder: list[Service] = []

    class Count(monitoring.CommandListener):
        def __init__(self) -> None:
            self.getmores = self.writes = 0

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if not holder or not holder[0].stream_open or not holder[0].tail_busy:
                return
            # a database-level stream's getMores name the database's "$cmd.aggregate"
            if event.command_name == "getMore" and event.command.get("collection") == (
                    "$cmd.aggregate"):
                self.getmores += 1
            elif event.command_name in ("insert", "update", "delete"):
                self.writes += 1

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    count = Count()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        live_uri, tz_aware=True, event_listeners=[count])
    db = client[f"board_outbox_test_pace_{uuid.uuid4().hex[:8]}"]
    try:
        await ensure_schema(db)
        stores = mongo_stores(db, MemoryLauncher())
        tenants = [f"t{i}" for i in range(3)]
        await seeded(stores, tenants)
        now = time.time()
        docs = [{"tenant_id": t, "seq": s, "type": "card.created", "card_id": "c", "at": now}
                for s in range(1, 101) for t in tenants]
        await db["board_events"].insert_many(docs)
        await db["board_event_counters"].insert_many([{"_id": t, "seq": 100} for t in tenants])
        service = service_on(stores, batch_size=20, stream_pace_seconds=5)
        launcher = stores.launcher
        assert isinstance(launcher, MemoryLauncher)
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            await eventually(lambda: service.stream_open)
            drains = service.stats.drains
            holder.append(service)
            await eventually(lambda: len(launcher.launches) == len(docs), timeout=60)
            holder.clear()
            passes = service.stats.drains - drains
            service.stop()
        assert count.writes >= 2 * passes > 0  # wakes enough: every write wakes this server's
        assert count.getmores <= passes + 2, (count.getmores, passes, count.writes)
        assert service.stats.stream_paced > 0
    finally:
        await client.drop_database(db.name)
        await client.close()


async def test_the_poll_net_stretches_while_the_stream_is_open_and_not_once_it_closes() -> None:
    backend = MemoryBackend(faults=FaultInjector())
    backend.events.quiet_seconds = 0.05
    service = service_on(backend.stores(), poll_interval_seconds=0.05,
                         stream_poll_interval_seconds=60)
    assert service.poll_interval == 0.05  # not open yet
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await eventually(lambda: service.stream_open)
        assert service.poll_interval == 60
        polls = service.stats.poll_wakes
        await anyio.sleep(0.5)
        assert service.stats.poll_wakes - polls <= 1  # stretched: not ten polls
        backend.faults.fail_at("changefeed.next", times=10_000)  # the stream cannot stay open
        await eventually(lambda: not service.stream_open)
        polls = service.stats.poll_wakes
        await anyio.sleep(0.5)
        assert service.stats.poll_wakes - polls >= 4  # back to every 0.05 s
        service.stop()


async def test_a_tenant_whose_drain_failed_is_retried_at_the_short_interval() -> None:
    """The stream is open, the poll net 60 s away: a tenant whose batch hit a store error is
    drained again after poll_interval_seconds, not at the next poll."""
    backend = MemoryBackend()
    await seeded(backend.stores(), [T])
    service = service_on(backend.stores(), poll_interval_seconds=0.05,
                         stream_poll_interval_seconds=60)
    real = backend.events.read_after
    failures = [StoreUnavailable("blip")]

    async def flaky(*args: Any) -> Any:
        if failures:
            raise failures.pop()
        return await real(*args)

    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await eventually(lambda: service.stream_open)
        await anyio.sleep(0.1)  # the start-up poll is over
        backend.events.read_after = flaky  # type: ignore[method-assign]
        await backend.events.emit(T, "card.created", "c")
        await eventually(lambda: len(backend.launcher.launches) == 1, timeout=5)
        assert not failures  # it did fail once
        assert service.stats.poll_wakes == 1  # found by the retry, not by a poll
        service.stop()
