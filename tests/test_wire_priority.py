"""Priority on the wire with two replicas (issue 33): two workers, each with its own client (as two
``run`` processes would be), share one database. A tenant's backlog of 40 launches at priority 0
was materialized before 5 of a subscription at priority 5; the 5 run first, though they are the
newest rows and each claim's window holds only the oldest; every row runs exactly once. Beside
it, a second tenant whose rows are all at -5 keeps its round-robin turn."""

from __future__ import annotations

import random
from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient

from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.adapters.mongo import mongo_stores
from board_outbox.engine.tail.tail import Tail, TailSettings
from board_outbox.engine.work.worker import EffectWorker, WorkerSettings
from board_outbox.model.board import Card
from board_outbox.model.clock import SystemClock
from board_outbox.model.rows import DONE
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import RowFilter, Stores
from board_outbox.service.runtime import build_registry

pytestmark = [pytest.mark.live_mongo, pytest.mark.anyio]

LOW, HIGH, SUNK = 40, 5, 6


async def _events(stores: Stores, tenant: str, card: str, n: int) -> None:
    for _ in range(n):
        seq = await stores.events.allocate_seq(tenant)
        await stores.events.insert({"tenant_id": tenant, "seq": seq, "type": "card.created",
                                    "card_id": card, "at": 1.0})


async def test_two_replicas_run_a_tenants_high_priority_rows_first(live_uri: str,
                                                                   live_db: Any) -> None:
    launcher = MemoryLauncher()
    clock = SystemClock()
    clients: list[Any] = [AsyncMongoClient(live_uri, tz_aware=True) for _ in range(2)]
    try:
        replicas = [mongo_stores(c[live_db.name], launcher, change_feed=False) for c in clients]
        first = replicas[0]
        rule = MatchRule(event_types=("card.created",))
        await first.subs.put(Subscription(sub_id="low", tenant_id="a", bot="low",
                                          rule=MatchRule(event_types=("card.created",),
                                                         column="inbox")))
        await first.subs.put(Subscription(sub_id="high", tenant_id="a", bot="high", priority=5,
                                          rule=MatchRule(event_types=("card.created",),
                                                         column="urgent")))
        await first.subs.put(Subscription(sub_id="sunk", tenant_id="b", bot="sunk",
                                          priority=-5, rule=rule))
        await first.cards.put(Card(tenant_id="a", card_id="c1", column="inbox"))
        await first.cards.put(Card(tenant_id="a", card_id="c2", column="urgent"))
        await first.cards.put(Card(tenant_id="b", card_id="c", column="inbox"))
        tail = Tail(events=first.events, cursors=first.cursors, outbox=first.outbox,
                    subs=first.subs, cards=first.cards, clock=clock,
                    settings=TailSettings(seed="earliest"), projections=())
        await _events(first, "a", "c1", LOW)
        await _events(first, "b", "c", SUNK)
        await tail.drain_all(["a", "b"])
        await anyio.sleep(0.05)  # the high rows are due later than every other row
        await _events(first, "a", "c2", HIGH)
        await tail.drain_all(["a"])

        workers = [EffectWorker(outbox=s.outbox, registry=build_registry(s, []), clock=clock,
                                settings=WorkerSettings(batch_size=2), rng=random.Random(i))
                   for i, s in enumerate(replicas)]
        # each claim of 2 rows reads a window of the 2 oldest due rows (a backlog)

        async def work(w: EffectWorker) -> None:
            while len(launcher.launches) < LOW + HIGH + SUNK:
                if (await w.tick_any()).claimed == 0:
                    await anyio.sleep(0.01)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for w in workers:
                    tg.start_soon(work, w)
        rows = await first.outbox.find(RowFilter(limit=1000))
    finally:
        for c in clients:
            await c.close()

    order = [(r.tenant_id, r.bot) for r in launcher.launches]
    assert len(rows) == LOW + HIGH + SUNK and all(r.state == DONE for r in rows)
    assert sorted(r.row_key for r in launcher.launches) == sorted(r.row_key for r in rows)
    a = [bot for t, bot in order if t == "a"]
    # the newest rows of tenant a went first (two replicas: a low row claimed by one may start
    # while the other is still starting the last high row it claimed)
    assert a[:HIGH + 1].count("high") == HIGH, a[:10]
    # tenant b (all at -5) kept its turn: its rows ran while a's backlog was still there
    last_b = max(i for i, (t, _) in enumerate(order) if t == "b")
    assert last_b < 2 * SUNK + HIGH + 6, order
