"""History headroom (A2): ``board_outbox_change_stream_headroom_seconds`` is the saved resume
token's save time minus the oldest change the server keeps. On the memory twin, and on a wire
server with a capped oplog: the gauge falls as writes roll the oplog toward the token, and once
it is below zero the token really cannot resume (286)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.errors import ChangeStreamLost
from board_outbox.service.config import load_config
from board_outbox.service.health import history_headroom
from board_outbox.service.runtime import Service
from board_outbox.service.wireserver import WireServer, find_executable
from board_outbox.surface.http.metrics import exposition

T = "t1"


@pytest.mark.anyio
async def test_headroom_on_the_memory_twin_and_its_gauge() -> None:
    backend = MemoryBackend()
    stores = backend.stores()
    assert await history_headroom(stores) is None  # no token yet
    await backend.events.emit(T, "card.created", "c")
    await anyio.sleep(0.05)
    await backend.tokens.save(0)
    room = await history_headroom(stores)
    assert room is not None and room >= 0.05
    service = Service(stores, load_config(env={}))
    service.status_enabled = True  # what the ops server turns on
    from board_outbox.surface.http.metrics import ServiceCollector

    service.metrics.prom.registry.register(ServiceCollector(service))
    await service.refresh_gauges()
    assert service.history_headroom == room
    _, body = exposition(service.metrics.prom.registry, "text/plain")
    assert f"board_outbox_change_stream_headroom_seconds {room}".encode() in body
    backend.events.forget_history()  # the history rolled past every token
    gone = await history_headroom(stores)
    assert gone is not None and gone < 0
    await backend.tokens.clear()
    assert await history_headroom(stores) is None


@pytest.fixture
def capped_oplog() -> Iterator[WireServer]:
    if find_executable() is None:
        pytest.skip("needs secantusd-py (the dev extra) to start a server with a capped oplog")
    with WireServer(oplog_max_entries=1500) as server:  # trimmed every 1,000 writes
        yield server


@pytest.mark.live_mongo
@pytest.mark.anyio
async def test_headroom_falls_as_the_capped_oplog_rolls_toward_the_token(
        capped_oplog: WireServer) -> None:
    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo import MongoChangeFeed, ensure_schema, mongo_stores

    client: Any = AsyncMongoClient(capped_oplog.uri, tz_aware=True)
    db = client["bo_headroom"]
    await ensure_schema(db)
    stores = mongo_stores(db, MemoryLauncher())
    feed = MongoChangeFeed(db, max_await_ms=200)
    assert stores.tokens is not None
    for _ in range(6):  # older history, written over about two seconds
        await db["filler"].insert_many([{"i": i} for i in range(250)])
        await anyio.sleep(0.3)
    token = None
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                nonlocal token
                async for ch in feed.watch(None):
                    if ch.tenant_id:
                        token = ch.token
                        tg.cancel_scope.cancel()

            tg.start_soon(watch)
            await anyio.sleep(0.3)
            await db["board_events"].insert_one({"tenant_id": T, "seq": 1, "type": "x",
                                                 "card_id": "c"})
    await stores.tokens.save(token)
    readings = [await history_headroom(stores)]
    assert readings[0] is not None and readings[0] > 1.5
    while (readings[-1] or 0) >= 0 and len(readings) < 20:
        await db["filler"].insert_many([{"i": i} for i in range(250)])
        readings.append(await history_headroom(stores))
    values = [r for r in readings if r is not None]
    assert len(values) == len(readings) > 2
    assert values == sorted(values, reverse=True) and values[-1] < 0 < values[0]
    # it fell in steps as the cap trimmed (a reading between the first and zero), not at once
    assert any(0 < v < values[0] for v in values)
    with pytest.raises(ChangeStreamLost):
        async for _ in feed.watch(token):
            break
    # the service exports what it measures
    service = Service(stores, load_config(env={}), rng=random.Random(1))
    service.status_enabled = True
    await service.refresh_gauges()
    assert service.history_headroom is not None and service.history_headroom < 0
    # a token document whose saved_at is not a date says nothing (R2), it does not break
    await db["board_outbox_state"].update_one({"_id": "resume_token:board_events"},
                                              {"$set": {"saved_at": "yesterday"}})
    assert await history_headroom(stores) is None
    await client.close()


def test_headroom_is_save_time_minus_history_start() -> None:
    """The gauge's unit and sign convention, from the formula: save time minus history start."""
    backend = MemoryBackend()

    async def go() -> float | None:
        await backend.events.emit(T, "card.created", "c")
        backend.tokens.token, backend.tokens.saved = 0, time.time() + 100.0
        return await history_headroom(backend.stores())

    room = anyio.run(go)
    assert room is not None and 99.0 < room <= 100.5
