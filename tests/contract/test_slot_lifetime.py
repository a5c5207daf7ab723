"""F2, issue 30: an in-flight slot lives exactly as long as its launch. The ``LimitStore``
contract for ``renew`` (fenced on the holder) and ``upkeep`` on every backend; the worker's lease
heartbeat renewing a running launch's slots; a launch cut when its slot ends under it (taken
over, or not renewed by its end), its slots given back in every outcome."""

from __future__ import annotations

import dataclasses
import math

import anyio
import pytest

from board_outbox.engine.flow.limits import LimitSettings
from board_outbox.engine.work.worker import EffectWorker
from board_outbox.model.limits import bot_key, tenant_key
from board_outbox.model.rows import PENDING
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import LaunchRequest, LimitStore
from board_outbox.service.runtime import build_registry
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

T = "t1"
K = "bot:t1/b"


def _t0(kit: Kit) -> float:
    return math.floor(kit.clock.now() / 10) * 10.0


def _limits(kit: Kit) -> LimitStore:
    assert kit.limits is not None
    return kit.limits


# --- the store contract ---------------------------------------------------------------------


async def test_only_its_holder_renews_a_slot(kit: Kit) -> None:
    lim, t0 = _limits(kit), _t0(kit)
    assert await lim.acquire(K, 1, "a", until=t0 + 50, now=t0)
    assert not await lim.renew(K, "b", until=t0 + 500)  # not b's: nothing written
    assert await lim.acquire(K, 1, "b", until=t0 + 300, now=t0 + 50)  # a's end stood at 50
    assert not await lim.renew(K, "a", until=t0 + 60)  # taken over: a renews nothing back
    # b's slot still ends at 300: a's refused renewal neither took it nor cut it to 60
    assert not await lim.acquire(K, 1, "a", until=t0 + 400, now=t0 + 100)
    assert not await lim.acquire(K, 1, "c", until=t0 + 400, now=t0 + 299)
    assert await lim.acquire(K, 1, "c", until=t0 + 400, now=t0 + 300)


async def test_a_renewed_slot_ends_at_its_new_end(kit: Kit) -> None:
    lim, t0 = _limits(kit), _t0(kit)
    assert await lim.acquire(K, 1, "a", until=t0 + 50, now=t0)
    assert await lim.acquire("bot:t1/other", 1, "a", until=t0 + 50, now=t0)
    assert await lim.renew(K, "a", until=t0 + 150)
    assert not await lim.acquire(K, 1, "b", until=t0 + 300, now=t0 + 100)  # still a's
    # only the key renewed moved: the holder's slot of another key ends where it did
    assert await lim.acquire("bot:t1/other", 1, "b", until=t0 + 300, now=t0 + 50)
    assert await lim.acquire(K, 1, "b", until=t0 + 300, now=t0 + 150)  # at its new end


async def test_a_released_slot_is_not_renewed(kit: Kit) -> None:
    lim, t0 = _limits(kit), _t0(kit)
    assert await lim.acquire(K, 1, "a", until=t0 + 50, now=t0)
    await lim.release(K, "a")
    assert not await lim.renew(K, "a", until=t0 + 150)  # a late beat after the launch ended
    assert await lim.acquire(K, 1, "b", until=t0 + 20, now=t0 + 1)  # free, not re-held by a
    await lim.release(K, "b")
    assert not await lim.renew(K, "b", until=t0 + 150)
    assert await lim.acquire(K, 1, "c", until=t0 + 30, now=t0 + 2)


async def test_upkeep_recreates_the_limits_indexes_after_a_drop(kit: Kit) -> None:
    lim, t0 = _limits(kit), _t0(kit)
    assert await lim.upkeep() == []  # all there (created at start): nothing to do
    if kit.drop_limits is None or kit.limit_indexes is None:  # a dict has no indexes to lose
        assert await lim.acquire(K, 1, "a", until=t0 + 50, now=t0)
        return
    wanted = {"key_holder", "expire_ttl"}
    assert wanted <= await kit.limit_indexes()
    await kit.drop_limits()
    assert await lim.acquire(K, 1, "a", until=t0 + 50, now=t0)  # the upsert makes it again...
    assert not wanted & await kit.limit_indexes()  # ... without its indexes
    assert sorted(await lim.upkeep()) == sorted(wanted)
    assert wanted <= await kit.limit_indexes()
    assert await lim.upkeep() == []
    assert not await lim.acquire(K, 1, "b", until=t0 + 50, now=t0 + 1)  # the slot survived


# --- the worker: a launch and its slot ------------------------------------------------------


class HeldLauncher:
    """A launch that runs until the test lets it end (``done``); ``started`` is set when it
    begins, ``cut`` when it was cancelled."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.done = anyio.Event()
        self.cut = False
        self.launches: list[LaunchRequest] = []

    async def launch(self, req: LaunchRequest) -> str:
        self.launches.append(req)
        self.started.set()
        try:
            await self.done.wait()
        except anyio.get_cancelled_exc_class():
            self.cut = True
            raise
        return "L"


async def _running(kit: Kit, slot_seconds: float) -> tuple[EffectWorker, HeldLauncher]:
    """One launch row of bot ``b`` (one in flight per bot and per tenant), and a worker whose
    launches are held; its real-time heartbeat is off, the test beats."""
    sub = Subscription(sub_id="s1", tenant_id=T, bot="b")
    await kit.sub(sub)
    await kit.card(T, "c0")
    await kit.emit(T, "card.created", "c0")
    await kit.tail(seed="earliest").drain_tenant(T)
    launcher = HeldLauncher()
    stores = dataclasses.replace(kit.stores, launcher=launcher)
    limits = LimitSettings(bot_in_flight=1, tenant_in_flight=1, slot_seconds=slot_seconds)
    worker = kit.worker(build_registry(stores, [], limits=limits), heartbeat_fraction=0,
                        lease_seconds=30)
    return worker, launcher


async def _beat(worker: EffectWorker) -> None:
    """One beat of the worker's lease heartbeat over what it has in flight."""
    await worker.extend_many(list(worker.inflight.values()))


async def test_a_launch_keeps_its_slots_past_slot_seconds_while_its_lease_beats(kit: Kit) -> None:
    worker, launcher = await _running(kit, slot_seconds=10)
    lim = _limits(kit)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.tick_any, [T])
        with anyio.fail_after(10):
            await launcher.started.wait()
        for _ in range(3):  # 24 s of launch with a 10 s slot: every beat moves its end on
            kit.clock.advance(8)
            await _beat(worker)
            now = kit.clock.now()
            for key in (bot_key(T, "b"), tenant_key(T)):
                assert not await lim.acquire(key, 1, "other", until=now + 60, now=now), key
        kit.clock.advance(9.9)  # 9.9 s after the last beat: still within its slot
        now = kit.clock.now()
        assert not await lim.acquire(bot_key(T, "b"), 1, "other", until=now + 60, now=now)
        launcher.done.set()
    [row] = await kit.rows(T)
    assert row.state == "done" and not launcher.cut
    now = kit.clock.now()
    for key in (bot_key(T, "b"), tenant_key(T)):  # given back at the end
        assert await lim.acquire(key, 1, "after", until=now + 60, now=now), key


async def test_a_launch_whose_slot_was_taken_over_is_cut_and_retried(kit: Kit) -> None:
    worker, launcher = await _running(kit, slot_seconds=10)
    lim = _limits(kit)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.tick_any, [T])
        with anyio.fail_after(10):
            await launcher.started.wait()
        kit.clock.advance(9)  # no beat for 9 s of a 10 s slot (a stalled replica)...
        # ... and another replica, its clock a second ahead, sees it ended and takes it
        now = kit.clock.now() + 1
        assert await lim.acquire(bot_key(T, "b"), 1, "other", until=now + 60, now=now)
        await _beat(worker)  # the renewal finds it taken over: the launch is cut
        with anyio.fail_after(10):
            while (await kit.rows(T))[0].state != PENDING:
                await anyio.sleep(0.01)
    [row] = await kit.rows(T)
    assert launcher.cut and row.attempts == 1 and "SlotLost" in row.errors[-1].error
    assert "taken over" in row.errors[-1].error
    now = kit.clock.now()
    # the other holder's slot stands (ending at now + 60); the tenant's slot was given back
    assert not await lim.acquire(bot_key(T, "b"), 1, "third", until=now + 60, now=now + 59)
    assert await lim.acquire(tenant_key(T), 1, "third", until=now + 60, now=now)


async def test_a_launch_no_beat_renews_is_cut_at_its_slots_end(kit: Kit) -> None:
    """The heartbeat stopped (a lost lease, a store that does not answer): the launch runs to
    the end of its slot and no further (on the event loop's clock), then gives its slots
    back."""
    worker, launcher = await _running(kit, slot_seconds=0.5)
    lim = _limits(kit)
    with anyio.fail_after(10):
        started = anyio.current_time()
        res = await worker.tick_any([T])
        took = anyio.current_time() - started
    assert res.retried == 1 and launcher.cut and 0.5 <= took < 5
    [row] = await kit.rows(T)
    assert "SlotLost" in row.errors[-1].error and "ended" in row.errors[-1].error
    now = kit.clock.now()
    for key in (bot_key(T, "b"), tenant_key(T)):
        assert await lim.acquire(key, 1, "after", until=now + 60, now=now), key


async def test_a_beat_after_its_slots_end_cuts_the_launch(kit: Kit) -> None:
    """The clock passed the slots' end between two beats (a stalled replica, a clock that
    stepped): the beat does not renew a slot another replica may have taken meanwhile; it cuts
    the launch, which gives its slots back."""
    worker, launcher = await _running(kit, slot_seconds=10)
    lim = _limits(kit)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.tick_any, [T])
        with anyio.fail_after(10):
            await launcher.started.wait()
        kit.clock.advance(10)
        await _beat(worker)
        with anyio.fail_after(10):
            while (await kit.rows(T))[0].state != PENDING:
                await anyio.sleep(0.01)
    [row] = await kit.rows(T)
    assert launcher.cut and "SlotLost" in row.errors[-1].error and "ended" in row.errors[-1].error
    now = kit.clock.now()
    for key in (bot_key(T, "b"), tenant_key(T)):
        assert await lim.acquire(key, 1, "after", until=now + 60, now=now), key


async def test_a_beat_that_fails_leaves_the_launch_its_slot_until_the_next(kit: Kit) -> None:
    """A renewal the store refuses (one failed beat) neither cuts the launch nor frees its
    slot early: the next beat renews it."""
    worker, launcher = await _running(kit, slot_seconds=10)
    lim = _limits(kit)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.tick_any, [T])
        with anyio.fail_after(10):
            await launcher.started.wait()
        kit.clock.advance(4)
        kit.faults.fail_at("limits.renew")
        await _beat(worker)  # refused: the slots still end at 10
        kit.clock.advance(4)
        await _beat(worker)  # renewed to 18
        kit.clock.advance(9)
        now = kit.clock.now()
        assert not await lim.acquire(bot_key(T, "b"), 1, "other", until=now + 60, now=now)
        launcher.done.set()
    [row] = await kit.rows(T)
    assert row.state == "done" and not launcher.cut


async def test_the_services_limits_pass_recreates_the_indexes_and_rides_out_a_failure(
        kit: Kit, caplog: pytest.LogCaptureFixture) -> None:
    """The service's periodic check (``limits_pass``, every ``limits.index_check_seconds``): a
    check the store refuses is one warning and no harm; the next re-creates what was dropped."""
    import logging

    from board_outbox.service.config import load_config
    from board_outbox.service.runtime import Service

    caplog.set_level(logging.WARNING, logger="board_outbox")
    service = Service(kit.stores, load_config(env={}, projections=[]), clock=kit.clock)
    if kit.drop_limits is not None:
        await kit.drop_limits()
    kit.faults.fail_at("limits.upkeep", times=2)
    assert await service.limits_pass() == [] and await service.limits_pass() == []
    refused = [r for r in caplog.records if "could not check the limits' indexes" in r.getMessage()]
    assert len(refused) == 1  # once, not at every pass
    created = await service.limits_pass()
    assert sorted(created) == ([] if kit.drop_limits is None else ["expire_ttl", "key_holder"])
    if kit.limit_indexes is not None:
        assert {"expire_ttl", "key_holder"} <= await kit.limit_indexes()
    assert await service.limits_pass() == []
