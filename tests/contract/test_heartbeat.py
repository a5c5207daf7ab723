"""O4: the lease heartbeat, on every backend. The kit's clock is manual; the heartbeat beats in
real time (lease_seconds * heartbeat_fraction), so the handlers below move the manual clock
between short real sleeps: a slow effect as the store sees it."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import pytest
from board_outbox_projections import BoardReflect

from board_outbox.engine.handlers.registry import ExecutionContext
from board_outbox.engine.work.worker import Lease
from board_outbox.model import transitions as tr
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import Claim
from tests.support.kits import Kit, claim

pytestmark = pytest.mark.anyio

T = "t1"
SUB = Subscription(sub_id="s", tenant_id=T, bot="bot", rule=MatchRule(event_types=("card.created",)))
LEASE = 10.0
BEAT = 0.005  # heartbeat every 0.05 s of real time


class SlowEffect:
    """Runs for ``seconds`` of store time, in 2 s steps; halfway through, a rival worker ticks."""

    def __init__(self, kit: Kit, seconds: float, rival: object) -> None:
        self.kit, self.seconds, self.rival = kit, seconds, rival
        self.rival_claimed: int | None = None
        self.runs = 0

    async def execute(self, row: EffectRow, ctx: ExecutionContext[Any]) -> str:
        self.runs += 1
        if self.runs > 1:
            return "launched again"
        elapsed = 0.0
        while elapsed < self.seconds:
            self.kit.clock.advance(2.0)
            elapsed += 2.0
            await anyio.sleep(0.12)  # a couple of beats
            if self.rival_claimed is None and elapsed >= self.seconds / 2:
                self.rival_claimed = (await self.rival.tick_any()).claimed  # type: ignore[attr-defined]
        return "launched"


async def _setup(kit: Kit, seconds: float, **settings: object) -> tuple[object, SlowEffect]:
    await kit.sub(SUB)
    await kit.card(T, "c1")
    await kit.emit(T, "card.created", "c1")
    await kit.tail(seed="earliest").drain_all([T])
    registry = kit.registry()
    rival = kit.worker(registry=registry, lease_seconds=LEASE, heartbeat_fraction=0)
    effect = SlowEffect(kit, seconds, rival)
    registry.register("launch", effect, replace=True)
    worker = kit.worker(registry=registry, lease_seconds=LEASE, **settings)
    return worker, effect


async def test_a_slow_effect_keeps_its_lease_and_runs_once(kit: Kit) -> None:
    worker, effect = await _setup(kit, seconds=40, heartbeat_fraction=BEAT)
    res = await worker.tick_any()  # type: ignore[attr-defined]
    assert res.done == 1 and effect.rival_claimed == 0 and effect.runs == 1
    (row,) = await kit.rows(T)
    assert row.state == "done" and row.attempts == 0 and row.outcome == "launched"


async def test_without_the_heartbeat_the_slow_effect_is_stolen_and_runs_twice(kit: Kit) -> None:
    worker, effect = await _setup(kit, seconds=40, heartbeat_fraction=0)
    res = await worker.tick_any()  # type: ignore[attr-defined]
    assert effect.rival_claimed == 1 and effect.runs == 2  # the residual window, wide open
    assert res.lease_lost == 1  # the late mark_done was fenced out


async def test_a_hung_effect_stops_beating_at_max_execution_and_the_reclaim_counts(kit: Kit) -> None:
    worker, effect = await _setup(kit, seconds=60, heartbeat_fraction=BEAT,
                                  max_execution_seconds=15)
    res = await worker.tick_any()  # type: ignore[attr-defined]
    # past 15 + 10 s the lease is gone: the rival reclaimed it (attempt counted: M9)
    assert effect.rival_claimed == 1 and res.lease_lost == 1
    (row,) = await kit.rows(T)
    assert row.state == "done" and row.attempts == 1 and row.outcome == "launched again"
    assert [e.kind for e in row.errors] == ["lease_expired"]


async def test_extend_lease_is_fenced_by_claim_id(kit: Kit) -> None:
    await kit.sub(SUB)
    await kit.card(T, "c1")
    await kit.emit(T, "card.created", "c1")
    await kit.tail(seed="earliest").drain_all([T])
    now = kit.clock.now()
    (mine,) = await claim(kit.outbox, T, now, LEASE, 1)
    assert not await kit.outbox.apply_claimed(
        mine.ref, "someone-else", tr.extend_lease(now=now, lease_until=now + 100))
    assert await kit.outbox.apply_claimed(
        mine.ref, mine.claim_id, tr.extend_lease(now=now, lease_until=now + 100))
    kit.clock.advance(50)  # past the first lease, within the extended one
    assert await claim(kit.outbox, T, kit.clock.now(), LEASE, 1) == []
    kit.clock.advance(51)
    (stolen,) = await claim(kit.outbox, T, kit.clock.now(), LEASE, 1)
    assert stolen.reclaimed and stolen.row is not None and stolen.row.attempts == 1
    assert not await kit.outbox.apply_claimed(
        mine.ref, mine.claim_id, tr.extend_lease(now=kit.clock.now(), lease_until=now + 500))


class CountingOutbox:
    """The kit's outbox, counting the fenced writes the heartbeat sends."""

    def __init__(self, inner: object) -> None:
        self.inner, self.one, self.many = inner, 0, 0

    async def apply_claimed(self, *args: object) -> bool:
        self.one += 1
        return await self.inner.apply_claimed(*args)  # type: ignore[attr-defined,no-any-return]

    async def apply_claimed_many(self, *args: object) -> list[object]:
        self.many += 1
        return await self.inner.apply_claimed_many(*args)  # type: ignore[attr-defined,no-any-return]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


async def _claimed(kit: Kit, n: int) -> list[Claim]:
    await kit.sub(SUB)
    await kit.card(T, "c1")
    for _ in range(n):
        await kit.emit(T, "card.created", "c1")
    await kit.tail(seed="earliest").drain_all([T])
    claims = await claim(kit.outbox, T, kit.clock.now(), LEASE, n)
    assert len(claims) == n and len({c.claim_id for c in claims}) == 1
    return claims


async def test_one_beat_extends_a_claims_rows_in_one_write_each_to_its_own_cap(kit: Kit) -> None:
    claims = await _claimed(kit, 4)
    worker = kit.worker(lease_seconds=LEASE, max_execution_seconds=15)
    counting = CountingOutbox(kit.outbox)
    worker.outbox = counting  # type: ignore[assignment]
    t0 = kit.clock.now()
    # three rows started together, one 12 s later (its cap is 12 s further out)
    leases = [Lease(c, t0) for c in claims[:3]] + [Lease(claims[3], t0 + 12)]
    kit.clock.set(t0 + 3)  # every lease to 13, under both caps: one write for the four
    await worker.extend_many(leases)
    assert [x.until for x in leases] == [t0 + 13] * 4 and (counting.one, counting.many) == (0, 1)
    # a rival takes one row of the group (released, say); the next beat loses only that one
    stolen = claims[1]
    assert await kit.outbox.apply_claimed(stolen.ref, stolen.claim_id, tr.release(now=t0 + 8))
    kit.clock.set(t0 + 8)
    await worker.extend_many(leases)
    # 8 + 10 = 18: capped at 15 for the three, not for the fourth: two more writes
    assert [x.until for x in leases] == [t0 + 15, t0 + 13, t0 + 15, t0 + 18]
    assert [x.stopped for x in leases] == ["", "lost", "", ""]
    assert (counting.one, counting.many) == (1, 2)
    stored = [await kit.raw_row(c.row.row_key) for c in claims if c.row is not None]
    assert [d and d.get("lease_until") for d in stored] == [t0 + 15, None, t0 + 15, t0 + 18]
    kit.clock.set(t0 + 15)  # at the three's cap: they stop; the fourth beats on
    await worker.extend_many(leases)
    assert [x.stopped for x in leases] == ["max_execution", "lost", "max_execution", ""]
    assert leases[3].until == t0 + 25 and (counting.one, counting.many) == (2, 2)


class SlowProjection(BoardReflect):
    """A batched apply that runs 40 s of store time; halfway through, a rival worker ticks."""

    name: ClassVar[str] = "slow"

    def __init__(self, kit: Kit, rival: object) -> None:
        super().__init__(kit.readmodels)
        self.kit, self.rival = kit, rival
        self.rival_claimed: int | None = None
        self.batches: list[int] = []

    async def apply_many(self, tenant_id: str, events: Any) -> list[str]:
        self.batches.append(len(events))
        for step in range(20):
            self.kit.clock.advance(2.0)
            await anyio.sleep(0.12)
            if step == 10 and self.rival_claimed is None:
                self.rival_claimed = (await self.rival.tick_any()).claimed  # type: ignore[attr-defined]
        return list(await super().apply_many(tenant_id, events))


@pytest.mark.parametrize("beat", [BEAT, 0])
async def test_a_slow_batched_projection_keeps_its_leases_under_the_batch_heartbeat(
        kit: Kit, beat: float) -> None:
    await kit.card(T, "c1")
    for _ in range(3):
        await kit.emit(T, "card.updated", "c1")
    await kit.tail(seed="earliest", projections=("slow",)).drain_all([T])
    reg = kit.registry()
    rival = kit.worker(registry=reg, lease_seconds=LEASE, heartbeat_fraction=0, batch_size=1)
    proj = SlowProjection(kit, rival)
    reg.register_projection(proj)
    res = await kit.worker(registry=reg, lease_seconds=LEASE, heartbeat_fraction=beat).tick_any()
    if beat:
        assert proj.rival_claimed == 0 and proj.batches == [3] and res.done == 3
    else:  # no heartbeat: the rival reclaims a row mid-apply, and our late mark of it is a no-op
        assert proj.rival_claimed == 1 and res.lease_lost == 1 and res.done == 2


async def test_a_row_queued_behind_a_slow_one_in_open_lanes_keeps_its_lease(kit: Kit) -> None:
    """Lanes that outlive the batch (``EffectWorker.lanes``): a later tick's row of the tenant
    waits in its lane behind a slow effect, past its own lease; the one heartbeat of the open
    lanes extends it too, so a rival ticking at the slow effect's end claims nothing, and each
    row runs once."""
    await kit.sub(SUB)
    await kit.card(T, "c1")
    await kit.emit(T, "card.created", "c1")
    await kit.tail(seed="earliest").drain_all([T])
    registry = kit.registry()
    rival = kit.worker(registry=registry, lease_seconds=LEASE, heartbeat_fraction=0)
    started, ended = anyio.Event(), anyio.Event()
    queued = anyio.Event()
    runs: list[int] = []
    rival_claimed: list[int] = []

    class Slow:
        async def execute(self, row: EffectRow, ctx: ExecutionContext[Any]) -> str:
            runs.append(row.seq)
            if row.seq == 1:
                started.set()
                await queued.wait()
                for _ in range(12):  # 24 s of store time, past the queued row's lease
                    kit.clock.advance(2.0)
                    await anyio.sleep(0.1)  # two beats
                rival_claimed.append((await rival.tick_any()).claimed)
                ended.set()
            return "launched"

    registry.register("launch", Slow(), replace=True)
    worker = kit.worker(registry=registry, lease_seconds=LEASE, heartbeat_fraction=BEAT)
    with anyio.fail_after(15):
        async with worker.lanes():
            await worker.tick_any()
            await started.wait()
            await kit.emit(T, "card.created", "c1")
            await kit.tail(seed="earliest").drain_all([T])
            assert (await worker.tick_any()).claimed == 1  # behind seq 1 in the tenant's lane
            queued.set()
            await ended.wait()
    assert rival_claimed == [0] and runs == [1, 2]
    rows = await kit.rows(T)
    assert [(r.state, r.attempts) for r in rows] == [("done", 0), ("done", 0)]
