"""O4: the lease heartbeat, on every backend. The kit's clock is manual; the heartbeat beats in
real time (lease_seconds * heartbeat_fraction), so the handlers below move the manual clock
between short real sleeps: a slow effect as the store sees it."""

from __future__ import annotations

import anyio
import pytest

from board_outbox.engine.registry import ExecutionContext
from board_outbox.model.domain import EffectRow, MatchRule, Subscription
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

    async def execute(self, row: EffectRow, ctx: ExecutionContext) -> str:
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
    assert not await kit.outbox.extend_lease(mine.ref, "someone-else", now, now + 100)
    assert await kit.outbox.extend_lease(mine.ref, mine.claim_id, now, now + 100)
    kit.clock.advance(50)  # past the first lease, within the extended one
    assert await claim(kit.outbox, T, kit.clock.now(), LEASE, 1) == []
    kit.clock.advance(51)
    (stolen,) = await claim(kit.outbox, T, kit.clock.now(), LEASE, 1)
    assert stolen.reclaimed and stolen.row is not None and stolen.row.attempts == 1
    assert not await kit.outbox.extend_lease(mine.ref, mine.claim_id, kit.clock.now(), now + 500)
