"""A claimed batch runs in lanes (``engine/work/lanes.py``): one per tenant, ``[worker] concurrency``
at once. A tenant's rows keep their order; a slow launch holds up only its own tenant; a failure
starts nothing more and cancels nothing running; shutdown gives back only what never started."""

from __future__ import annotations

import random
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.engine.flow.pressure import Pressure
from board_outbox.engine.work.lanes import Lanes, run_lanes
from board_outbox.model.board import Card
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import LaunchRequest
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from tests.support.kits import memory_kit

pytestmark = pytest.mark.anyio


async def test_each_lane_keeps_its_order_and_lanes_run_side_by_side() -> None:
    units = [("a", 1), ("b", 1), ("a", 2), ("c", 1), ("b", 2), ("a", 3)]
    log: list[tuple[str, int, str]] = []
    running = peak = 0

    async def run(unit: tuple[str, int]) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        log.append((*unit, "start"))
        await anyio.sleep(0.01)
        log.append((*unit, "end"))
        running -= 1

    got = await run_lanes(units, lambda u: u[0], run, concurrency=2, stopping=lambda: False)
    assert peak == 2  # at most ``concurrency``, and more than one
    for lane in "abc":
        seen = [(n, what) for t, n, what in log if t == lane]
        # one after another within a lane: each unit ends before the next one starts
        assert seen == sorted(seen, key=lambda x: (x[0], x[1] == "end")), seen
    assert sorted(got.finished) == sorted(units) and len(got.started) == len(units)


async def test_concurrency_one_keeps_the_claims_order() -> None:
    units = [("a", 1), ("b", 1), ("a", 2)]
    order: list[tuple[str, int]] = []

    async def run(unit: tuple[str, int]) -> None:
        await anyio.sleep(0)
        order.append(unit)

    await run_lanes(units, lambda u: u[0], run, concurrency=1, stopping=lambda: False)
    assert order == units


async def test_a_failure_starts_nothing_more_and_cancels_nothing_running() -> None:
    started: list[str] = []
    finished: list[str] = []
    slow_may_end = anyio.Event()

    async def run(unit: str) -> None:
        started.append(unit)
        if unit == "a1":
            await slow_may_end.wait()  # running while b1 fails: it must not be cancelled
        elif unit == "b1":
            slow_may_end.set()
            raise RuntimeError("b1 broke")
        finished.append(unit)

    lanes = Lanes[str]()
    with pytest.raises(RuntimeError, match="b1 broke"):  # itself, not an exception group
        await run_lanes(["a1", "b1", "a2", "b2"], lambda u: u[0], run, concurrency=4,
                        stopping=lambda: False, lanes=lanes)
    assert "a1" in finished  # ran to its end
    assert "a2" not in started and "b2" not in started  # nothing started after the failure
    assert lanes.finished == ["a1"] and set(lanes.started) == {"a1", "b1"}


async def test_stopping_starts_nothing_more() -> None:
    stop = False

    async def run(unit: str) -> None:
        nonlocal stop
        stop = True

    lanes = await run_lanes(["a1", "a2", "b1"], lambda u: u[0], run, concurrency=1,
                            stopping=lambda: stop)
    assert lanes.started == ["a1"] and lanes.finished == ["a1"]


async def test_a_slow_launch_holds_up_only_its_own_tenant() -> None:
    """The production worker: one claimed batch with tenant a's slow launch first and tenant b's
    launches after it. b's are launched while a's is still running (before lanes, b waited for
    a's whole launch), and a's second row waits for its first."""
    kit = memory_kit()
    for t in ("a", "b"):
        await kit.sub(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="bot"))
        await kit.card(t, "c")
    await kit.emit("a", "card.created", "c")
    await kit.emit("a", "card.created", "c")
    await kit.emit("b", "card.created", "c")
    await kit.emit("b", "card.created", "c")
    tail = kit.tail(seed="earliest")
    await tail.drain_all(["a", "b"])
    release = anyio.Event()
    launched: list[tuple[str, int]] = []
    inner = kit.launcher.launch

    async def launch(req: LaunchRequest) -> Any:
        if (req.tenant_id, req.seq) == ("a", 1):
            await release.wait()  # a slow runner
        launched.append((req.tenant_id, req.seq))
        return await inner(req)

    kit.launcher.launch = launch  # type: ignore[method-assign]
    worker = kit.worker(batch_size=10, concurrency=4)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.tick_any)
        try:
            with anyio.move_on_after(10):
                while ("b", 2) not in launched:
                    await anyio.sleep(0.01)
            assert ("b", 2) in launched, launched  # b's ran while a's first was still running
            assert ("a", 2) not in launched  # a's second row waits for its first
        finally:
            release.set()
    assert launched[:2] == [("b", 1), ("b", 2)] and launched[2:] == [("a", 1), ("a", 2)]


@pytest.mark.parametrize("concurrency", [1, 2])
async def test_the_worker_runs_at_most_its_concurrency_of_lanes_at_once(concurrency: int) -> None:
    """``[worker] concurrency`` is what the production worker's lanes honour: three tenants'
    slow launches in one claimed batch, never more than ``concurrency`` running at once, and
    that many when there is room."""
    kit = memory_kit()
    for t in ("a", "b", "c"):
        await kit.sub(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="bot"))
        await kit.card(t, "c")
        await kit.emit(t, "card.created", "c")
    await kit.tail(seed="earliest").drain_all(["a", "b", "c"])
    running = peak = 0
    full = anyio.Event()  # ``concurrency`` launches running: none ends before that
    inner = kit.launcher.launch

    async def launch(req: LaunchRequest) -> Any:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == concurrency:
            full.set()
        await full.wait()
        await anyio.sleep(0.05)  # a slow runner: a lane beyond the limit would start meanwhile
        running -= 1
        return await inner(req)

    kit.launcher.launch = launch  # type: ignore[method-assign]
    res = await kit.worker(batch_size=10, concurrency=concurrency).tick_any()
    assert res.done == 3 and peak == concurrency


async def test_a_slow_tenant_holds_only_its_own_lane_while_new_rows_of_others_arrive() -> None:
    """Lanes outlive the batch (the service's worker loop): one tenant's bot is slow (here: it
    runs until the test lets it end), three fast tenants' events arrive while its launches run
    (5 each, ``batch_size = 20``). The fast tenants' 15 launches happen while the slow launch
    still runs (before, the next claim waited for the batch's slowest lane: every fast launch
    waited for all of the slow tenant's), and the slow tenant's rows still run one after
    another, in order, once it ends."""
    backend = MemoryBackend()
    tenants = ("slow", "f1", "f2", "f3")
    for t in tenants:
        await backend.subs.put(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="bot"))
        await backend.board.put(Card(tenant_id=t, card_id="c"))
    release = anyio.Event()
    started = anyio.Event()
    launched: list[tuple[str, int]] = []
    running: list[tuple[str, int]] = []
    inner = backend.launcher.launch

    async def launch(req: LaunchRequest) -> Any:
        running.append((req.tenant_id, req.seq))
        if req.tenant_id == "slow":
            started.set()
            await release.wait()
        launched.append((req.tenant_id, req.seq))
        running.remove((req.tenant_id, req.seq))
        return await inner(req)

    backend.launcher.launch = launch  # type: ignore[method-assign]
    config = load_config(env={}, worker={"batch_size": 20}, projections=[],
                         tail={"seed": "earliest"})
    service = Service(backend.stores(), config, rng=random.Random(1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        try:
            with anyio.fail_after(5):
                for _ in range(3):
                    await backend.events.emit("slow", "card.created", "c")
                await started.wait()  # the slow tenant's first launch runs
                for t in tenants[1:]:
                    for _ in range(5):
                        await backend.events.emit(t, "card.created", "c")
                while sum(t != "slow" for t, _ in launched) < 15:
                    await anyio.sleep(0.01)
            assert running == [("slow", 1)] and not any(t == "slow" for t, _ in launched)
        finally:
            release.set()
        with anyio.fail_after(10):
            while len(launched) < 18:
                await anyio.sleep(0.01)
        service.stop()
    assert [s for t, s in launched if t == "slow"] == [1, 2, 3]
    for t in tenants[1:]:
        assert [s for u, s in launched if u == t] == [1, 2, 3, 4, 5]


async def test_open_lanes_hold_at_most_two_claims_and_a_slow_tenant_a_claims_worth() -> None:
    """Bounds of lanes that outlive the batch (the worker's ticks inside ``lanes``): the rows in
    the lanes never pass two claims' worth (``bound``; the backpressure scales the claim, so
    the bound too), a tenant's lane takes at most a claim's worth of its handed rows (the rest
    wait, leased, in the hand-off, and the tail gets no room for more of them) while other
    tenants' handed rows still go to their own lanes; the pick, which cannot leave a tenant
    out, is held by the bound."""
    kit = memory_kit()
    for t in ("slow", "fast"):
        await kit.sub(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="bot"))
        await kit.card(t, "c")
    release = anyio.Event()
    inner = kit.launcher.launch

    async def launch(req: LaunchRequest) -> Any:
        if req.tenant_id == "slow":
            await release.wait()
        return await inner(req)

    kit.launcher.launch = launch  # type: ignore[method-assign]
    worker = kit.worker(batch_size=4)
    tail = kit.tail(seed="earliest")
    tail.handoff = worker
    for _ in range(12):
        await kit.emit("slow", "card.created", "c")
    with anyio.fail_after(5):
        async with worker.lanes():
            await tail.drain_all(["slow"])  # handed over, born claimed
            assert worker.handed >= 8
            for _ in range(3):
                await worker.tick_any()
                await anyio.sleep(0.01)
            assert worker.held("slow") == 4 and worker.handed >= 4  # a claim's worth, no more
            assert worker.room("slow") == 0  # the tail reads no more of it meanwhile
            for _ in range(3):
                await kit.emit("fast", "card.created", "c")
            await tail.drain_all(["fast"])
            await worker.tick_any()
            while len(kit.launcher.launches) < 3:  # the fast rows ran beside the slow lane
                await anyio.sleep(0.01)
            # rows no tail handed over (pending in the store) come by the pick: the bound holds
            for _ in range(8):
                await kit.emit("slow", "card.created", "c")
            await kit.tail(seed="earliest").drain_all(["slow"])
            for _ in range(4):
                kit.clock.advance(2)  # the pick's schedule (a worker fed by its tail)
                await worker.tick_any()
                assert worker.held("slow") <= worker.bound() == 8
            assert worker.held("slow") == 8
            worker.pressure = Pressure(kit.clock)
            worker.pressure.failed("a slow store")
            assert worker.bound() < 8  # backpressure shrinks what the lanes take
            release.set()
        assert worker.held("slow") == 0 and not worker.inflight
    assert {r.tenant_id for r in kit.launcher.launches[:3]} == {"fast"}
