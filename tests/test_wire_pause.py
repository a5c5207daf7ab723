"""Issue 33 on the wire: two replicas (two ``Service`` instances in one process, each with its
own launcher) on one MongoDB-wire database. A pause of two tenants -- one owned by each
replica -- is honoured by both within one heartbeat; while it lasts the tail keeps
materializing and every row of those tenants is held (attempts unchanged), by both replicas,
while the other tenants run; after resume every held row runs exactly once, attempts still 0,
each replica launching a tenant's rows in their order."""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.engine.flow.membership import owner
from board_outbox.model.domain import DONE, PENDING, Card, Subscription
from board_outbox.model.pause import HELD_OFFSET
from board_outbox.ports import RowFilter, Stores
from board_outbox.service.config import load_config
from board_outbox.service.config_sections import Config
from board_outbox.service.runtime import Service
from board_outbox.surface.pausing import pause, resume

pytestmark = [pytest.mark.anyio, pytest.mark.live_mongo]

TENANTS = [f"t{i}" for i in range(16)]  # each replica owns some (all but surely: 2 in 2^16)
TIMEOUT = 3.0  # membership.heartbeat_timeout_seconds: a heartbeat (and a pause read) every 0.5 s
HEARTBEAT = TIMEOUT / 6
SLACK = 0.5  # scheduling on a loaded test machine, on top of the heartbeat


async def eventually(cond: Callable[[], Awaitable[bool] | bool], timeout: float = 30.0) -> None:
    with anyio.fail_after(timeout):
        while True:
            got = cond()
            if not isinstance(got, bool):
                got = await got
            if got:
                return
            await anyio.sleep(0.02)


def config(name: str) -> Config:
    return load_config(env={}, projections=["board-reflect"],  # type: ignore[arg-type]
                       service={"replica_name": name},
                       tail={"poll_interval_seconds": 0.5, "seed": "earliest"},
                       membership={"heartbeat_timeout_seconds": TIMEOUT})


async def emit(stores: Stores, tenant: str) -> None:
    seq = await stores.events.allocate_seq(tenant)
    await stores.events.insert({"tenant_id": tenant, "seq": seq, "type": "card.updated",
                                "card_id": "c", "at": time.time()})


async def launch_rows(stores: Stores, tenant: str) -> list[Any]:
    rows = await stores.outbox.find(RowFilter(tenant_id=tenant, limit=10_000))
    return [r for r in rows if r.sub_id is not None]


async def test_a_pause_is_honoured_by_both_replicas_within_a_heartbeat(live_db: Any) -> None:
    from board_outbox.adapters.mongo.client import mongo_stores

    seed = mongo_stores(live_db, MemoryLauncher())
    for t in TENANTS:
        await seed.subs.put(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="b"))
        await seed.cards.put(Card(tenant_id=t, card_id="c"))  # type: ignore[attr-defined]
        await emit(seed, t)
    launchers = {"a": MemoryLauncher(), "b": MemoryLauncher()}
    a, b = (Service(mongo_stores(live_db, launchers[n]), config(n), rng=random.Random(i))
            for i, n in enumerate("ab"))
    replicas = {"a": a, "b": b}

    async def launched() -> int:
        return sum(len(x.launches) for x in launchers.values())

    async with anyio.create_task_group() as tg:
        tg.start_soon(a.run)
        tg.start_soon(b.run)
        await eventually(lambda: a.ownership.members == b.ownership.members and
                         len(a.ownership.members) == 2)
        await eventually(lambda: _eq(launched(), len(TENANTS)))
        members = a.ownership.members
        # one paused tenant owned by each replica: each replica's worker meets paused rows
        paused = [next(t for t in TENANTS if owner(members, t) == s.ownership.member_id)
                  for s in (a, b)]
        assert a.pauses is not None and b.pauses is not None
        for t in paused:
            await pause(seed, "tenant", t, reason="wire test", by="test", now=time.time())
        at = time.monotonic()
        seen: dict[str, float] = {}

        def honoured() -> bool:
            for name, s in replicas.items():
                assert s.pauses is not None
                if name not in seen and {f"paused: tenant {t}" for t in paused} <= set(s.pauses.pauses):
                    seen[name] = time.monotonic() - at
            return len(seen) == 2

        await eventually(honoured, timeout=10)
        print(f"pause honoured after {seen} (heartbeat {HEARTBEAT} s)")
        assert max(seen.values()) <= HEARTBEAT + SLACK, seen  # within one heartbeat, each

        # while paused: the tail keeps materializing, nothing of the paused tenants launches
        before = {n: len(x.launches) for n, x in launchers.items()}
        for _ in range(4):
            for t in TENANTS:
                await emit(seed, t)
        others = [t for t in TENANTS if t not in paused]
        await eventually(lambda: _eq(launched(), len(TENANTS) + 4 * len(others)))
        await eventually(lambda: _held(seed, paused, 4 * len(paused)))
        for t in paused:
            assert await seed.cursors.get(t) == await seed.events.allocated_seq(t)  # materialized
            held = [r for r in await launch_rows(seed, t) if r.state == PENDING]
            assert len(held) == 4 and all(r.not_before >= HELD_OFFSET for r in held)
            assert all(r.attempts == 0 and r.errors == [] and r.waiting == f"paused: tenant {t}"
                       for r in held)
        for name, x in launchers.items():
            assert not [r for r in x.launches[before[name]:] if r.tenant_id in paused]
        assert a.stats.worker.held >= 1 and b.stats.worker.held >= 1  # both replicas held rows
        # no churn: a held row is claimed once, not again every tick
        held_before = a.stats.worker.held + b.stats.worker.held
        await anyio.sleep(4 * HEARTBEAT)
        assert a.stats.worker.held + b.stats.worker.held == held_before
        # the projection rows of the paused tenants ran (a pause holds effects, not read models)
        for t in paused:
            rows = await seed.outbox.find(RowFilter(tenant_id=t, limit=10_000))
            assert all(r.state == DONE for r in rows if r.projection)

        for t in paused:
            assert await resume(seed, "tenant", t, by="test", now=time.time())
        await eventually(lambda: _eq(launched(), len(TENANTS) * 5), timeout=10)
        a.stop()
        b.stop()

    for t in paused:
        rows = await launch_rows(seed, t)
        assert len(rows) == 5
        assert all(r.state == DONE and r.attempts == 0 and r.errors == [] for r in rows)
    for x in launchers.values():
        for t in TENANTS:  # each replica launched a tenant's rows in their order
            seqs = [r.seq for r in x.launches if r.tenant_id == t]
            assert seqs == sorted(seqs)
    keys = [r.row_key for x in launchers.values() for r in x.launches]
    assert len(keys) == len(set(keys)) == len(TENANTS) * 5  # each row launched exactly once


async def _eq(got: Awaitable[int], want: int) -> bool:
    return await got == want


async def _held(stores: Stores, tenants: list[str], n: int) -> bool:
    rows = [r for t in tenants for r in await launch_rows(stores, t)]
    return sum(1 for r in rows if r.state == PENDING and r.not_before >= HELD_OFFSET) == n
