"""Backpressure (issue 29 item 4, T1): when store calls slow down or fail, a replica asks less of
the store -- smaller claims, a smaller hand-off, smaller tail batches, longer pauses -- and asks
for full batches again once the store answers in time. ``Pressure`` is the one factor they share
(AIMD: halve on a slow pass or a failure, at most once per cooldown, never below 1/16; add an
eighth back per cooldown of clean running, credited by the next normal pass; a stretched pause
is at most ``MAX_STRETCHED_SECONDS``)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from board_outbox.engine.flow.pressure import (
    COOLDOWN_SECONDS,
    GROW,
    MAX_STRETCHED_SECONDS,
    MIN_FACTOR,
    Pressure,
)
from board_outbox.model.clock import ManualClock
from board_outbox.model.errors import StoreUnavailable
from board_outbox.model.subscriptions import MatchRule, Subscription
from tests.support.kits import Kit

T = "t1"


def test_the_factor_halves_per_cooldown_stops_at_its_floor_and_grows_back() -> None:
    clock = ManualClock()
    p = Pressure(clock, slow_seconds=2.0)
    p.observe(2.0)  # exactly the limit is not slow
    assert p.factor == 1.0 and p.shrinks == 0
    p.observe(2.01)
    assert p.factor == 0.5 and p.shrinks == 1
    p.failed("timeout")  # within the cooldown: one back-off per cooldown, not per call
    assert p.factor == 0.5
    for _ in range(10):
        clock.advance(COOLDOWN_SECONDS)
        p.failed("timeout")
    assert p.factor == MIN_FACTOR and p.shrinks == 4  # 1/2, 1/4, 1/8, 1/16: then it holds
    assert p.scale(100) == 6 and p.scale(10) == 1 and p.scale(10, floor=4) == 4
    assert p.stretch(0.25) == 4.0  # pauses grow as the factor shrinks
    clock.advance(COOLDOWN_SECONDS)
    p.observe(0.1)
    assert p.factor == pytest.approx(MIN_FACTOR + 1 / 8)  # additive
    p.observe(0.1)  # a normal pass within the cooldown of the last change: not yet
    assert p.factor == pytest.approx(MIN_FACTOR + 1 / 8)
    grown = []
    for _ in range(20):
        clock.advance(COOLDOWN_SECONDS)
        p.observe(0.1)
        grown.append(p.factor)
    assert grown == sorted(grown) and grown[-1] == 1.0  # monotone, back to full, no further


def test_recovery_follows_clean_time_not_the_count_of_passes() -> None:
    """At its floor, a replica's pauses are stretched, so its passes are rare: one normal pass
    after a long clean stretch credits all of it (back to full within about
    ``(1 - MIN_FACTOR) / GROW`` cooldowns of clean time, however few passes ran), while time
    spent in slow passes or failures earns nothing. A stretched pause is bounded."""
    clock = ManualClock()
    p = Pressure(clock, slow_seconds=2.0)
    for _ in range(5):
        p.failed("timeout")
        clock.advance(COOLDOWN_SECONDS)
    assert p.factor == MIN_FACTOR
    assert p.stretch(1.0) == MAX_STRETCHED_SECONDS  # not 16 s: it looks again within 5 s
    assert p.stretch(0.25) == 4.0 and p.stretch(30.0) == 30.0  # a long pause is its own length
    # the store stays slow for a while: at the floor, no credit accrues
    for _ in range(6):
        clock.advance(COOLDOWN_SECONDS)
        p.observe(3.0)
    clock.advance(COOLDOWN_SECONDS)
    p.observe(0.1)
    assert p.factor == pytest.approx(MIN_FACTOR + GROW)  # one cooldown clean: one step
    # then one clean pass after a stretched pause of MAX_STRETCHED_SECONDS: five steps at once
    clock.advance(MAX_STRETCHED_SECONDS)
    p.observe(0.1)
    assert p.factor == pytest.approx(MIN_FACTOR + 6 * GROW)
    clock.advance(MAX_STRETCHED_SECONDS)
    p.observe(0.1)
    assert p.factor == 1.0  # back to full within two stretched pauses of clean answers


class SlowOutbox:
    """The outbox with every claim-side call taking ``delay`` real seconds, or failing."""

    def __init__(self, outbox: Any) -> None:
        self._outbox, self.delay, self.fail = outbox, 0.0, False

    def _slowed(self, name: str) -> Any:
        inner = getattr(self._outbox, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.fail:
                raise StoreUnavailable("store timed out")
            await anyio.sleep(self.delay)
            return await inner(*args, **kwargs)
        return call

    def __getattr__(self, name: str) -> Any:
        if name in ("claim_any", "reclaim_expired", "upsert_rows"):
            return self._slowed(name)
        return getattr(self._outbox, name)


@pytest.mark.anyio
async def test_a_slow_or_failing_store_shrinks_claims_handoff_and_batches_then_they_recover(
    kit: Kit,
) -> None:
    """The production worker and tail, sharing one factor as the service wires them: failing
    and slow claim passes shrink the claim size and the hand-off's room, a failing insert shrinks
    the tail's batch (its cursor untouched); normal passes bring them back to full."""
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="bot",
                               rule=MatchRule(event_types=("card.created",))))
    for i in range(30):
        await kit.card(T, f"c{i}")
        await kit.emit(T, "card.created", f"c{i}")
    tail = kit.tail(seed="earliest", batch_size=100)
    await tail.drain_all([T])  # 30 rows, born pending (no hand-off here): a backlog to claim
    worker = kit.worker(batch_size=40)
    slow = SlowOutbox(kit.outbox)
    worker.outbox = slow  # type: ignore[assignment]
    tail.outbox = slow  # type: ignore[assignment]
    # 0.5 s: a normal pass on a loaded machine's wire server must not read as slow
    pressure = Pressure(kit.clock, slow_seconds=0.5)
    worker.pressure = tail.pressure = pressure
    full = (worker.claim_limit(), worker.capacity(), tail.batch_limit())
    assert full[0] == 40 and full[2] == 100

    slow.fail = True  # the store times out: every claim pass fails
    for _ in range(3):
        with pytest.raises(StoreUnavailable):
            await worker.tick_any()
        kit.clock.advance(COOLDOWN_SECONDS)
    assert pressure.factor == 1 / 8
    assert (worker.claim_limit(), tail.batch_limit()) == (5, 12)
    assert worker.capacity() < full[1]
    slow.fail = False
    res = await worker.tick_any()
    assert res.claimed == 5  # a backlog, but a claim an eighth the size
    assert pressure.factor == 1 / 4  # that pass was normal: an eighth back

    slow.delay = 0.6  # answering, but slower than slow_seconds: a slow pass backs off too
    kit.clock.advance(COOLDOWN_SECONDS)
    await worker.tick_any()
    assert pressure.factor == 1 / 8

    slow.delay, slow.fail = 0.0, True  # the tail's insert times out: the batch aborts
    kit.clock.advance(COOLDOWN_SECONDS)
    await kit.card(T, "late")
    await kit.emit(T, "card.created", "late")
    res = await tail.drain_tenant(T)
    assert res.stopped == "aborted" and await kit.cursors.get(T) == 30  # nothing passed
    assert pressure.factor == 1 / 16

    slow.fail = False
    for _ in range(10):
        kit.clock.advance(COOLDOWN_SECONDS)
        await worker.tick_any()
    assert pressure.factor == 1.0
    assert (worker.capacity(), tail.batch_limit()) == full[1:]
    await tail.drain_tenant(T)
    assert await kit.cursors.get(T) == 31
