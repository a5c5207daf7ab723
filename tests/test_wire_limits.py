"""F2 on the wire: a limit holds across replicas. Four workers, each with its own client (as four
``run`` processes would be), share one database with ``bot_in_flight = 2``; the launcher, the bot
runner's stand-in, records how many launches of each bot run at once."""

from __future__ import annotations

import random
from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient

from benchmarks.common import CountingRunner, one_bot_backlog
from board_outbox.adapters.mongo import mongo_stores
from board_outbox.engine.limits import LimitSettings
from board_outbox.engine.outcomes import TickResult
from board_outbox.engine.tail import Tail, TailSettings
from board_outbox.engine.worker import EffectWorker, WorkerSettings
from board_outbox.model.clock import SystemClock
from board_outbox.model.domain import DONE
from board_outbox.ports import RowFilter
from board_outbox.service.runtime import build_registry

pytestmark = [pytest.mark.live_mongo, pytest.mark.anyio]

T = "t1"
ROWS = 24
WORKERS = 4


async def test_two_in_flight_per_bot_across_four_replicas(live_uri: str, live_db: Any) -> None:
    runner = CountingRunner(0.05)
    clock = SystemClock()
    clients: list[Any] = [AsyncMongoClient(live_uri, tz_aware=True) for _ in range(WORKERS)]
    try:
        replicas = [mongo_stores(c[live_db.name], runner, change_feed=False) for c in clients]
        first = replicas[0]
        await one_bot_backlog(first, T, "b", ROWS, clock.now())
        tail = Tail(events=first.events, cursors=first.cursors, outbox=first.outbox,
                    subs=first.subs, cards=first.cards, clock=clock,
                    settings=TailSettings(seed="earliest"), projections=())
        await tail.drain_tenant(T)

        limits = LimitSettings(bot_in_flight=2, wait_seconds=0.02)
        workers = [EffectWorker(outbox=s.outbox, registry=build_registry(s, [], limits=limits),
                                clock=clock, settings=WorkerSettings(batch_size=2),
                                rng=random.Random(i))
                   for i, s in enumerate(replicas)]
        total = TickResult()

        async def work(w: EffectWorker) -> None:
            while sum(runner.launched.values()) < ROWS:
                res = await w.tick_any()
                total.add(res)
                if res.claimed == 0 or res.deferred == res.claimed:
                    await anyio.sleep(0.01)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for w in workers:
                    tg.start_soon(work, w)
        rows = await first.outbox.find(RowFilter(tenant_id=T, limit=1000))
    finally:
        for c in clients:
            await c.close()

    assert runner.most["b"] == 2  # never more than the limit, and the limit was reached
    assert total.deferred > 0  # the limit really held rows back
    assert len(rows) == ROWS and all(r.state == DONE for r in rows)
    assert all(r.attempts == 0 and r.errors == [] for r in rows)  # waiting spent nothing
    assert total.failed == total.retried == 0
    assert sorted(runner.launched.values()) == [1] * ROWS  # each launched once
