"""Coalescing per (subscription, card) across replicas (issue 33, item 2): two services in one
process, each with its own tail and worker, both claiming any tenant's rows (membership off:
every row is contended), on the memory twins and on the wire. A 100-edit burst to one card
launches at most 3 times, the last with the final state; every other row of the burst ends
coalesced, pointing at a row that covers it."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend, MemoryLauncher
from board_outbox.model.domain import COALESCED, DONE, Card, Coalesce, MatchRule, Subscription
from board_outbox.ports import RowFilter, Stores
from board_outbox.service.config import load_config
from board_outbox.service.config_sections import Config
from board_outbox.service.runtime import Service

pytestmark = pytest.mark.anyio

T, CARD, EDITS = "acme", "c1", 100
QUIET, MAX_WAIT = 2.0, 60.0


def config(name: str) -> Config:
    return load_config(env={}, projections=[], service={"replica_name": name},  # type: ignore[arg-type]
                       tail={"seed": "earliest"}, membership={"enabled": False})


async def eventually(cond: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:
    with anyio.fail_after(timeout):
        while not await cond():
            await anyio.sleep(0.1)


async def scenario(stores_for: Callable[[str], Stores], launchers: list[MemoryLauncher]) -> None:
    seed = stores_for("seed")
    await seed.subs.put(Subscription(
        sub_id="triage", tenant_id=T, bot="b", rule=MatchRule(event_types=("card.updated",)),
        coalesce=Coalesce(quiet_seconds=QUIET, max_wait_seconds=MAX_WAIT)))
    a = Service(stores_for("a"), config("a"), rng=random.Random(1))
    b = Service(stores_for("b"), config("b"), rng=random.Random(2))
    last = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.run)
        tg.start_soon(b.run)
        for i in range(EDITS):  # a burst: each edit the card's new state, then its event
            await seed.cards.put(Card(tenant_id=T, card_id=CARD, title=f"v{i}"))  # type: ignore[attr-defined]
            last = await seed.events.allocate_seq(T)
            await seed.events.insert(  # type: ignore[attr-defined]
                {"tenant_id": T, "seq": last, "type": "card.updated", "card_id": CARD, "at": 0.0})

        async def settled() -> bool:
            counts = await seed.outbox.count_by_state(T)
            return counts.get(DONE, 0) + counts.get(COALESCED, 0) == EDITS

        await eventually(settled)
        a.stop()
        b.stop()
    rows = {r.seq: r for r in await seed.outbox.find(RowFilter(tenant_id=T, limit=1000))}
    launches = [x for launcher in launchers for x in launcher.launches]
    launched = sorted(s for s, r in rows.items() if r.state == DONE)
    assert 1 <= len(launches) <= 3, launched
    assert len(launches) == len(launched)
    final = rows[max(launched)]
    assert final.seq == last and final.event is not None and final.event.title == f"v{EDITS - 1}"
    by_key = {r.row_key: r for r in rows.values()}
    for r in rows.values():
        if r.state == COALESCED:
            assert r.coalesced_into in by_key and by_key[r.coalesced_into].seq > r.seq
    assert a.metrics.prom is not b.metrics.prom
    coalesced = sum(s.value for svc in (a, b) for fam in svc.metrics.prom.registry.collect()
                    for s in fam.samples if s.name == "board_outbox_rows_coalesced_total")
    assert coalesced == EDITS - len(launched)


async def test_a_burst_on_one_card_across_two_replicas_memory() -> None:
    backend = MemoryBackend()
    launcher = backend.launcher
    await scenario(lambda _name: backend.stores(), [launcher])


@pytest.mark.timeout(180)  # heavy: tens of seconds on a loaded machine (default 90 s)
@pytest.mark.live_mongo
async def test_a_burst_on_one_card_across_two_replicas_on_the_wire(live_db: Any) -> None:
    from board_outbox.adapters.mongo.client import mongo_stores

    launchers: list[MemoryLauncher] = []

    def stores_for(_name: str) -> Stores:
        launcher = MemoryLauncher()
        launchers.append(launcher)
        return mongo_stores(live_db, launcher)

    await scenario(stores_for, launchers)
