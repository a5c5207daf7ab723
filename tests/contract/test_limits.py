"""F2: concurrency and rate limits. The ``LimitStore`` contract on every backend (memory twins,
mongomock, the wire), and the worker deferring a launch over a limit without spending attempts."""

from __future__ import annotations

import math

import anyio
import pytest

from board_outbox.engine.flow.limits import LimitSettings
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.model.limits import bot_key, rate_slot, rate_window, tenant_key
from board_outbox.model.rows import DONE, PENDING
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import LimitStore
from board_outbox.service.health import tenant_statuses
from board_outbox.service.runtime import build_registry
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

T = "t1"
K = "bot:t1/b"


def _t0(kit: Kit) -> float:
    """A time near the kit's clock (real-looking: the TTL index removes documents whose expiry
    is past), on a 10-second boundary so rate windows start on it."""
    return math.floor(kit.clock.now() / 10) * 10.0


def _limits(kit: Kit) -> LimitStore:
    assert kit.limits is not None
    return kit.limits


# --- the store contract ---------------------------------------------------------------------


async def test_in_flight_slots_are_taken_up_to_the_limit_and_released(kit: Kit) -> None:
    lim, t0 = _limits(kit), _t0(kit)
    assert await lim.acquire(K, 2, "a", until=t0 + 100, now=t0)
    assert await lim.acquire(K, 2, "b", until=t0 + 100, now=t0)
    assert not await lim.acquire(K, 2, "c", until=t0 + 100, now=t0)  # both held
    assert await lim.acquire(K, 2, "a", until=t0 + 100, now=t0)  # its own slot: still its
    assert await lim.acquire("bot:t1/other", 2, "c", until=t0 + 100, now=t0)  # another key
    await lim.release(K, "a")
    assert await lim.acquire(K, 2, "c", until=t0 + 100, now=t0)  # a's slot is free again
    assert not await lim.acquire(K, 2, "d", until=t0 + 100, now=t0)
    await lim.release(K, "nobody")  # holds nothing: nothing happens
    assert not await lim.acquire(K, 2, "d", until=t0 + 100, now=t0)


async def test_a_slot_is_free_again_at_the_exact_end_of_its_lease(kit: Kit) -> None:
    lim, t0 = _limits(kit), _t0(kit)
    assert await lim.acquire(K, 1, "dead", until=t0 + 50, now=t0)
    assert not await lim.acquire(K, 1, "next", until=t0 + 150, now=t0 + 49.999)
    assert await lim.acquire(K, 1, "next", until=t0 + 150, now=t0 + 50)  # until == now: free
    assert not await lim.acquire(K, 1, "dead", until=t0 + 200, now=t0 + 50)  # lost to "next"
    await lim.release(K, "dead")  # a late release of a lost slot frees nothing
    assert not await lim.acquire(K, 1, "third", until=t0 + 200, now=t0 + 51)


async def test_racing_acquires_share_exactly_the_limit(kit: Kit) -> None:
    lim, t0 = _limits(kit), _t0(kit)
    won: list[str] = []

    async def one(h: str) -> None:
        if await lim.acquire(K, 3, h, until=t0 + 100, now=t0):
            won.append(h)

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(one, f"h{i}")
    assert len(won) == 3


async def test_a_rate_counts_launches_per_window(kit: Kit) -> None:
    lim, t0 = _limits(kit), _t0(kit)
    assert [await lim.take(K, 2.0, now=t0 + 0.2) for _ in range(3)] == [True, True, False]
    assert await lim.take(K, 2.0, now=t0 + 1)  # the next second
    assert await lim.take("tenant:t1", 2.0, now=t0 + 0.5)  # another key counts on its own
    # 0.5 per second: one launch per 2-second window
    assert await lim.take(K, 0.5, now=t0 + 100)
    assert not await lim.take(K, 0.5, now=t0 + 101.9)
    assert await lim.take(K, 0.5, now=t0 + 102)


async def test_racing_takes_share_exactly_the_rate(kit: Kit) -> None:
    lim, t0 = _limits(kit), _t0(kit)
    won = 0

    async def one() -> None:
        nonlocal won
        if await lim.take(K, 3.0, now=t0 + 400):
            won += 1

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(one)
    assert won == 3


def test_rate_windows() -> None:
    assert rate_window(5.0) == (1, 5)
    assert rate_window(2.5) == (1, 2)  # rounded down: never over
    assert rate_window(0.5) == (2, 1)
    assert rate_window(0.3) == (4, 1)  # one per 4 s: 0.25/s, under 0.3
    assert rate_window(0.001) == (1000, 1)
    cid, allowed, end = rate_slot(K, 0.5, now=201.5)
    assert (allowed, end) == (1, 202.0) and cid.startswith(K)


# --- the worker -----------------------------------------------------------------------------


async def _one_row(kit: Kit, sub: Subscription, n: int = 1) -> None:
    await kit.sub(sub)
    for i in range(n):
        await kit.card(sub.tenant_id, f"c{i}", labels=sub.consume_labels)
        await kit.emit(sub.tenant_id, "card.created", f"c{i}")
    await kit.tail(seed="earliest").drain_tenant(sub.tenant_id)


async def test_a_launch_over_its_bot_limit_waits_without_spending_an_attempt(kit: Kit) -> None:
    sub = Subscription(sub_id="s1", tenant_id=T, bot="b", max_in_flight=1,
                       consume_labels=("go",))
    await _one_row(kit, sub)
    lim = _limits(kit)
    assert await lim.acquire(bot_key(T, "b"), 1, "someone", until=kit.clock.now() + 3600, now=kit.clock.now())
    worker = kit.worker()
    worker.metrics = metrics = Metrics()
    res = await worker.tick_any([T])
    assert (res.deferred, res.done, res.retried, res.failed) == (1, 0, 0, 0)
    [row] = await kit.rows(T)
    assert row.state == PENDING and row.attempts == 0 and row.errors == []
    assert row.waiting is not None and "in_flight" in row.waiting and bot_key(T, "b") in row.waiting
    assert row.not_before == pytest.approx(kit.clock.now() + LimitSettings().wait_seconds)
    assert kit.launcher.launches == [] and not row.consume_marked
    card = await kit.cards.get(T, "c0")
    assert card.labels == ("go",)  # nothing spent while over the limit
    assert _limited(metrics) == {("bot", "in_flight"): 1.0}

    assert await _waiting(kit) == 1  # status counts it

    kit.clock.advance(0.1)  # not due yet
    assert (await worker.tick_any([T])).claimed == 0
    await lim.release(bot_key(T, "b"), "someone")
    kit.clock.advance(1.0)
    res = await worker.tick_any([T])
    assert res.done == 1
    [row] = await kit.rows(T)
    assert row.state == DONE and row.attempts == 0 and row.waiting is None
    assert await _waiting(kit) == 0
    assert len(kit.launcher.launches) == 1
    # the slot was held only around the launch: it is free again
    assert await lim.acquire(bot_key(T, "b"), 1, "after", until=kit.clock.now() + 3600, now=kit.clock.now())


async def test_a_rate_limit_defers_to_the_next_window(kit: Kit) -> None:
    sub = Subscription(sub_id="s1", tenant_id=T, bot="b", max_per_second=1.0)
    await _one_row(kit, sub, n=3)
    worker = kit.worker()
    res = await worker.tick_any([T])
    assert (res.done, res.deferred) == (1, 2)
    deferred = [r for r in await kit.rows(T) if r.state == PENDING]
    end = rate_slot(bot_key(T, "b"), 1.0, kit.clock.now())[2]
    assert all(r.not_before >= end and "per_second" in (r.waiting or "") for r in deferred)
    for _ in range(4):
        kit.clock.advance(1.0)
        await worker.tick_any([T])
    rows = await kit.rows(T)
    assert [r.state for r in rows] == [DONE] * 3 and all(r.attempts == 0 for r in rows)
    assert len(kit.launcher.launches) == 3


async def test_tenant_limits_from_the_settings_apply_to_every_bot(kit: Kit) -> None:
    await _one_row(kit, Subscription(sub_id="s1", tenant_id=T, bot="b1"))  # 1 row
    await _one_row(kit, Subscription(sub_id="s2", tenant_id=T, bot="b2"))  # 2 rows (s1, s2)
    registry = build_registry(kit.stores, [], limits=LimitSettings(tenant_in_flight=1))
    lim = _limits(kit)
    assert await lim.acquire(tenant_key(T), 1, "someone", until=kit.clock.now() + 3600, now=kit.clock.now())
    worker = kit.worker(registry)
    res = await worker.tick_any([T])
    assert res.deferred == 3 and kit.launcher.launches == []
    await lim.release(tenant_key(T), "someone")
    kit.clock.advance(1.0)
    assert (await worker.tick_any([T])).done == 3
    assert {r.bot for r in kit.launcher.launches} == {"b1", "b2"}
    # one at a time, each giving the tenant's one slot back
    assert await lim.acquire(tenant_key(T), 1, "again", until=kit.clock.now() + 3600, now=kit.clock.now())


async def test_a_subscription_limit_replaces_the_configured_bot_limit(kit: Kit) -> None:
    """``[limits] bot_in_flight = 1`` with its one slot held: the subscription without its own
    limit waits; the one whose ``max_in_flight`` is 0 (no limit) or 2 launches."""
    for sub_id, own in (("plain", None), ("free", 0), ("two", 2)):
        await _one_row(kit, Subscription(sub_id=sub_id, tenant_id=sub_id, bot="b",
                                         max_in_flight=own))
    registry = build_registry(kit.stores, [], limits=LimitSettings(bot_in_flight=1))
    lim, now = _limits(kit), kit.clock.now()
    for tenant in ("plain", "free", "two"):
        assert await lim.acquire(bot_key(tenant, "b"), 1, "someone", until=now + 3600, now=now)
    worker = kit.worker(registry)
    for tenant in ("plain", "free", "two"):
        await worker.tick_any([tenant])
    assert sorted(r.tenant_id for r in kit.launcher.launches) == ["free", "two"]
    [waiting] = await kit.rows("plain")
    assert waiting.state == PENDING and waiting.attempts == 0


async def test_a_launch_that_fails_gives_its_slot_back(kit: Kit) -> None:
    sub = Subscription(sub_id="s1", tenant_id=T, bot="b", max_in_flight=1)
    await _one_row(kit, sub)
    kit.launcher.fail = lambda _r: True
    res = await kit.worker().tick_any([T])
    assert res.retried == 1  # a real failure still counts its attempt
    now = kit.clock.now()
    assert await _limits(kit).acquire(bot_key(T, "b"), 1, "x", until=now + 3600, now=now)


async def test_a_release_the_store_refuses_frees_the_slot_at_its_lease(kit: Kit) -> None:
    sub = Subscription(sub_id="s1", tenant_id=T, bot="b", max_in_flight=1)
    await _one_row(kit, sub)
    kit.faults.fail_at("limits.release")
    assert (await kit.worker().tick_any([T])).done == 1  # the launch is not undone
    lim, now = _limits(kit), kit.clock.now()
    assert not await lim.acquire(bot_key(T, "b"), 1, "x", until=now + 3600, now=now)
    slot = LimitSettings().slot_seconds
    assert await lim.acquire(bot_key(T, "b"), 1, "x", until=now + 3600, now=now + slot)


async def _waiting(kit: Kit) -> int:
    """``status``'s count of the tenant's rows waiting on a limit (one aggregate)."""
    stores = kit.stores
    stores.status = kit.status_store
    return (await tenant_statuses(stores, kit.clock.now()))[T].waiting_on_limit


def _limited(metrics: Metrics) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for fam in metrics.prom.registry.collect():
        for s in fam.samples:
            if s.name == "board_outbox_limited_total":
                out[(s.labels["scope"], s.labels["kind"])] = s.value
    return out


async def test_a_bots_limits_are_per_tenant(kit: Kit) -> None:
    """Two tenants' bots of the same name are two bots: one tenant's bot at its in-flight limit
    (its one slot held) or past its rate does not hold back the other tenant's."""
    for tenant in ("ta", "tb"):
        await _one_row(kit, Subscription(sub_id=f"{tenant}-s", tenant_id=tenant, bot="b"))
    registry = build_registry(kit.stores, [], limits=LimitSettings(bot_in_flight=1,
                                                                   bot_per_second=1.0))
    lim, now = _limits(kit), kit.clock.now()
    assert await lim.acquire(bot_key("ta", "b"), 1, "someone", until=now + 3600, now=now)
    worker = kit.worker(registry)
    res = await worker.tick_any()
    assert (res.done, res.deferred) == (1, 1)
    assert [r.tenant_id for r in kit.launcher.launches] == ["tb"]
    await lim.release(bot_key("ta", "b"), "someone")
    kit.clock.advance(LimitSettings().wait_seconds)  # the same rate window as tb's launch
    assert (await worker.tick_any()).done == 1
    assert sorted(r.tenant_id for r in kit.launcher.launches) == ["ta", "tb"]


async def test_a_hard_stop_inside_a_launch_still_gives_its_slots_back(kit: Kit) -> None:
    """The launch is cancelled (a hard stop, a deadline) while it holds its bot's and tenant's
    slots: the release runs to the end anyway, so the next launch does not wait out
    ``slot_seconds``."""
    from board_outbox.engine.flow.limits import LaunchGate
    from board_outbox.model.rows import EffectRow

    gate = LaunchGate(_limits(kit), LimitSettings(bot_in_flight=1, tenant_in_flight=1))
    sub = Subscription(sub_id="s1", tenant_id=T, bot="b")
    row = EffectRow(tenant_id=T, row_key=f"{T}/1/sub/s1", seq=1, kind="launch", sub_id="s1")
    entered = False
    with anyio.CancelScope() as scope:
        async with gate.hold(row, sub, "me", kit.clock):
            entered = True
            scope.cancel()
            await anyio.sleep(3600)  # the launch, cut here
    assert entered and scope.cancelled_caught
    now = kit.clock.now()
    for key in (bot_key(T, "b"), tenant_key(T)):
        assert await _limits(kit).acquire(key, 1, "next", until=now + 3600, now=now), key


@pytest.mark.parametrize("until", [math.nan, math.inf, "ghost", 30 * 86400.0])
async def test_a_planted_slot_that_no_launch_can_have_written_is_taken_over(
    kit: Kit, until: object, caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 30: a held slot ending NaN, Infinity, not a number, or a month ahead (further than
    any lease) would block its bot for good (the store's filter never matched NaN or Infinity:
    every take was a duplicate key). It is taken over, with one warning naming it on Mongo."""
    from board_outbox.model.limits import slot_id

    lim, t0 = _limits(kit), _t0(kit)
    assert kit.put_raw_limit is not None
    planted = t0 + until if isinstance(until, float) and until == 30 * 86400.0 else until
    await kit.put_raw_limit(slot_id(K, 0), {"key": K, "holder": "ghost", "until": planted})
    assert await lim.acquire(K, 1, "a", until=t0 + 100, now=t0)
    assert not await lim.acquire(K, 1, "b", until=t0 + 100, now=t0)  # now a's, for real


async def test_a_negative_rate_counter_keeps_its_window_shut(kit: Kit) -> None:
    """Issue 30: a counter planted at ``n: -1000`` would open its window to a thousand launches;
    it is not a count, so that window stays shut, and the next window counts again."""
    lim, t0 = _limits(kit), _t0(kit)
    assert kit.put_raw_limit is not None
    cid, _allowed, end = rate_slot(K, 1.0, t0)
    await kit.put_raw_limit(cid, {"n": -1000})
    assert [await lim.take(K, 1.0, t0) for _ in range(3)] == [False, False, False]
    assert await lim.take(K, 1.0, end)  # the next window
    assert not await lim.take(K, 1.0, end)  # at 1/s: one per window
