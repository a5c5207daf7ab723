"""The service writes the rolling series (issue 33, item 6) once a minute, never per event: its
own loop, a manual clock moved minute by minute while events flow, the memory store counting
the writes; a store that fails one flush loses nothing; the shutdown flushes once more. And on
the wire: a flush refused by a ``failCommand`` failpoint is carried to the next minute."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.engine.upkeep.series import read_window
from board_outbox.model.board import Card
from board_outbox.model.clock import ManualClock
from board_outbox.model.series import MINUTE, SeriesCounts, minute_of
from board_outbox.model.subscriptions import Subscription
from board_outbox.service import upkeep
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from tests.support.faults import FaultInjector, FaultProxy

pytestmark = pytest.mark.anyio


async def eventually(cond: Callable[[], Awaitable[bool] | bool], timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while True:
            got = cond()
            if got if isinstance(got, bool) else await got:
                return
            await anyio.sleep(0.005)


async def _service(backend: MemoryBackend, clock: ManualClock, **cfg: Any) -> Service:
    for t in ("t1", "t2"):
        await backend.subs.put(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="b"))
        await backend.board.put(Card(tenant_id=t, card_id="c"))
    config = load_config(env={}, tail={"seed": "earliest", "poll_interval_seconds": 0.05},
                         service={"metrics_interval_seconds": 0.02}, projections=[], **cfg)
    return Service(backend.stores(), config, clock=clock, rng=random.Random(1),
                   member_id="replica-1")


async def test_counts_are_flushed_once_a_minute_never_per_event(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upkeep, "SERIES_CHECK_SECONDS", 0.002)  # the loop looks very often
    backend = MemoryBackend()
    clock = ManualClock(float(minute_of(ManualClock().now())) + 1)
    service = await _service(backend, clock)
    store = backend.series
    start = minute_of(clock.now())
    emitted = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        for minute in range(1, 4):
            for _ in range(5):  # five events this minute, each launched and done
                await backend.events.emit("t1", "card.created", "c")
                emitted += 1
                await eventually(lambda: service.stats.worker.done == emitted)  # noqa: B023
            await anyio.sleep(0.05)  # the loop ran many times within the minute: no write
            assert store.writes == minute - 1
            clock.advance(MINUTE)
            await eventually(lambda: store.writes == minute)  # noqa: B023
        await anyio.sleep(0.05)
        assert store.writes == 3  # one write a minute, whatever the events and the loop's turns
        service.stop()
    assert store.writes == 4  # and one on the way out
    window = await read_window(store, clock.now() + MINUTE, 4)
    assert [window.figures[start + i * MINUTE].counts.done for i in range(3)] == [5, 5, 5]
    assert sum(window.counts("materialized")) == service.stats.events_passed == 15
    assert sum(window.counts("done")) == 15


async def test_a_failing_store_costs_the_series_nothing_and_the_loop_survives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upkeep, "SERIES_CHECK_SECONDS", 0.002)
    backend = MemoryBackend()
    faults = FaultInjector()
    clock = ManualClock(float(minute_of(ManualClock().now())) + 1)
    service = await _service(backend, clock)
    assert service.series is not None
    service.series.store = FaultProxy(backend.series, "series", faults)  # type: ignore[assignment]
    start = minute_of(clock.now())
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await backend.events.emit("t2", "card.created", "c")
        await eventually(lambda: service.stats.worker.done == 1)
        faults.fail_at("series.flush", times=2)  # two minutes' flushes refused
        for _ in range(2):
            clock.advance(MINUTE)
            hits = faults.hits["series.flush"]
            await eventually(lambda: faults.hits["series.flush"] == hits + 1)  # noqa: B023
        assert service.loops["series"] and store_empty(backend)
        await backend.events.emit("t2", "card.created", "c")
        await eventually(lambda: service.stats.worker.done == 2)
        clock.advance(MINUTE)
        await eventually(lambda: backend.series.writes == 1)
        service.stop()
    assert backend.series.writes == 2  # the third minute's, then the shutdown's (nothing new)
    window = await read_window(backend.series, clock.now() + MINUTE, 4)
    assert window.minutes[0] == start
    # the first two minutes' flushes failed: their counts went with the third minute's
    assert window.counts("done") == [0, 0, 2, 0] and sum(window.counts("materialized")) == 2


def store_empty(backend: MemoryBackend) -> bool:
    return backend.series.writes == 0


async def test_the_lag_flushed_is_the_owned_tenants_from_the_metrics_refresh() -> None:
    backend = MemoryBackend()
    clock = ManualClock(float(minute_of(ManualClock().now())) + 1)
    service = await _service(backend, clock)
    service.metrics.lag = {"t1": 4, "t2": 0, "t3": 9}
    service.ownership.set_members(["replica-1", "replica-2"])
    mine = {t for t in ("t1", "t2", "t3") if service.ownership.owns(t)}
    clock.advance(MINUTE)
    assert service.series is not None and await service.series.flush_due()
    [point] = await backend.series.read(0, 2**40, None)
    assert dict(point.lag) == {t: n for t, n in service.metrics.lag.items() if t in mine and n}
    assert point.counts == SeriesCounts() and point.replica == "replica-1"


async def test_a_batch_another_replica_passed_first_is_not_counted_as_materialized(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two replicas racing on a tenant both write its rows (they collapse) but only one moves
    its cursor: the loser's batch (``cas_lost``) is not counted again in the series."""
    from board_outbox.engine.tail.drain import DrainResult

    backend = MemoryBackend()
    service = await _service(backend, ManualClock())

    async def drained(tenants: list[str], rounds: int = 1) -> list[DrainResult]:
        return [DrainResult(tenant_id="t1", materialized=5, stopped="cas_lost"),
                DrainResult(tenant_id="t2", materialized=3, cursor_after=3)]

    monkeypatch.setattr(service.tail, "drain_all", drained)
    service.wake_tenant("t1")
    assert await service.drain_pass(full=False)
    assert service.stats.materialized == 8 and service.series_counts().materialized == 3


async def test_series_off_writes_nothing() -> None:
    backend = MemoryBackend()
    service = await _service(backend, ManualClock(), series={"enabled": False})
    assert service.series is None


@pytest.mark.live_mongo
async def test_a_flush_refused_on_the_wire_is_carried_to_the_next_minute(
        live_uri: str, live: Any) -> None:
    """``failCommand`` on the series' update: the minute's flush fails on the wire; the next
    minute's document carries its counts (a StoreError/StoreUnavailable, never a crash)."""
    import uuid

    from pymongo import AsyncMongoClient, MongoClient

    from board_outbox.adapters.mongo import ensure_schema
    from board_outbox.adapters.mongo.series import MongoSeriesStore
    from board_outbox.engine.upkeep.series import SeriesRecorder, SeriesSettings

    if not live.failpoints():
        pytest.skip("this server has no test commands")
    app = f"bo-series-{uuid.uuid4().hex[:6]}"
    client: Any = AsyncMongoClient(live_uri, appname=app, tz_aware=True, timeoutMS=1500)
    admin: MongoClient[dict[str, Any]] = MongoClient(live_uri)
    name = f"bo_series_{uuid.uuid4().hex[:8]}"
    try:
        db = client[name]
        await ensure_schema(db)
        clock = ManualClock(float(minute_of(ManualClock().now())) + 1)
        counts = [SeriesCounts()]
        rec = SeriesRecorder(MongoSeriesStore(db), clock, "r1", SeriesSettings(),
                             counts=lambda: counts[0], lag=dict)
        m0 = rec.minute
        counts[0] = SeriesCounts(materialized=7, done=6, dead=1)
        admin.admin.command("configureFailPoint", "failCommand", mode="alwaysOn", data={
            "failCommands": ["update"], "appName": app, "errorCode": 2})
        try:
            clock.advance(MINUTE)
            assert not await rec.flush_due()
        finally:
            admin.admin.command("configureFailPoint", "failCommand", mode="off")
        counts[0] = SeriesCounts(materialized=9, done=9, dead=1)
        clock.advance(MINUTE)
        assert await rec.flush_due()
        window = await read_window(MongoSeriesStore(db), clock.now(), 2)
        assert m0 not in window.figures
        assert window.figures[m0 + MINUTE].counts == SeriesCounts(materialized=9, done=9, dead=1)
    finally:
        await client.drop_database(name)
        await client.close()
        admin.close()
