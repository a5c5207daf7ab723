"""Change streams and the whole service against a real MongoDB-wire server (MONGODB_URI, mongod,
or SecantusDB started by the fixture; skipped, with the reason, only when none exists)."""

from __future__ import annotations

import random
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.adapters.mongo import MongoChangeFeed, MongoEventLog, mongo_stores
from board_outbox.model.board import Card
from board_outbox.model.errors import ChangeStreamLost
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service

pytestmark = [pytest.mark.anyio, pytest.mark.live_mongo]


async def test_change_stream_yields_inserts_and_resumes_after_token(live_db: Any) -> None:
    events, feed = MongoEventLog(live_db), MongoChangeFeed(live_db, max_await_ms=200)
    got: list[tuple[str, int]] = []
    token = None
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                nonlocal token
                async for ch in feed.watch(None):
                    if not ch.tenant_id:  # a quiet batch's post-batch token
                        continue
                    got.append((ch.tenant_id, ch.seq))
                    token = ch.token
                    if len(got) == 2:
                        tg.cancel_scope.cancel()

            tg.start_soon(watch)
            await anyio.sleep(1.0)  # the stream is open
            for t in ("a", "b"):
                seq = await events.allocate_seq(t)
                await events.insert({"tenant_id": t, "seq": seq, "type": "x", "card_id": "c"})
    assert got == [("a", 1), ("b", 1)]
    seq = await events.allocate_seq("a")
    await events.insert({"tenant_id": "a", "seq": seq, "type": "x", "card_id": "c"})
    with anyio.fail_after(20):
        async for ch in feed.watch(token):  # resumes right after ("b", 1)
            if not ch.tenant_id:
                continue
            assert (ch.tenant_id, ch.seq) == ("a", 2)
            break


async def test_dropped_collection_ends_the_stream_as_lost(live_db: Any) -> None:
    events, feed = MongoEventLog(live_db), MongoChangeFeed(live_db, max_await_ms=200)
    seq = await events.allocate_seq("a")
    await events.insert({"tenant_id": "a", "seq": seq, "type": "x", "card_id": "c"})
    lost: list[BaseException] = []
    with anyio.fail_after(20):
        try:
            async with anyio.create_task_group() as tg:
                async def drop_later() -> None:
                    await anyio.sleep(1.0)
                    await live_db["board_events"].drop()

                tg.start_soon(drop_later)
                async for _ in feed.watch(None):
                    pass
        except* ChangeStreamLost as group:  # the task group wraps what the stream raised
            lost.extend(group.exceptions)
    assert len(lost) == 1 and isinstance(lost[0], ChangeStreamLost)


async def test_service_on_a_real_replica_set_wakes_on_insert(live_db: Any) -> None:
    launcher = MemoryLauncher()
    stores = mongo_stores(live_db, launcher)
    await stores.subs.put(Subscription(sub_id="s", tenant_id="t", bot="b"))
    await stores.cards.put(Card(tenant_id="t", card_id="c"))
    cfg = load_config(env={}, tail={"poll_interval_seconds": 60, "seed": "earliest"})
    service = Service(stores, cfg, rng=random.Random(1))
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            await anyio.sleep(1.5)
            seq = await stores.events.allocate_seq("t")
            await stores.events.insert({"tenant_id": "t", "seq": seq, "type": "x", "card_id": "c"})
            while not launcher.launches:
                await anyio.sleep(0.02)
            service.stop()
    assert service.stats.stream_wakes >= 1 and [r.seq for r in launcher.launches] == [1]
