"""The console's view of the tenants that need a look is shared by its page loads (issue 30):
alone, one aggregate in the store (``StatusStore.attention``) per ``metrics_interval_seconds``
whatever the number of loads, pages and viewers, refreshed after the response that found it
old; beside a replica, the replica's status sorted once per refresh. Counted in store calls
around a console on the memory twins (the wire figures: ``benchmarks/console_pages.py``)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from board_outbox.model.clock import ManualClock
from board_outbox.model.errors import StoreUnavailable
from board_outbox.service.config import load_config
from board_outbox.surface.console import build_console
from board_outbox.surface.console.attention import VIEW_PAGES, WAIT_AFTER
from board_outbox.surface.console.data import PAGE_SIZE, ConsoleData
from tests.test_console_scale import _board

pytestmark = pytest.mark.anyio

AGE = 10.0  # service.metrics_interval_seconds: the view's age


def _rows(html: str) -> list[str]:
    return [line.split('"')[1] for line in html.split("data-tenant=")[1:]]


@asynccontextmanager
async def alone(tenants: int) -> AsyncIterator[tuple[httpx.AsyncClient, ConsoleData, Any,
                                                     ManualClock]]:
    """A standalone console over ``tenants`` tenants (``_board``), its view on a manual clock."""
    b, stores, calls = await _board(tenants)
    app = build_console(stores, load_config(env={}, service={"metrics_interval_seconds": AGE}))
    data: ConsoleData = app.state.console
    clock = ManualClock(1000.0)
    assert data.alone is not None
    data.alone.clock = clock.now
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as client:
        yield client, data, (b, calls), clock


async def test_page_loads_share_one_read_of_who_needs_a_look() -> None:
    async with alone(300) as (client, _data, (b, calls), clock):
        for path in ("/", "/?page=2", "/", "/?page=2", "/"):
            assert (await client.get(path)).status_code == 200
            clock.advance(AGE / 10)
        assert calls["status.attention"] == 1  # five loads of two pages: one aggregate
        # a tenant catches up; the view still shows it behind until its age has passed
        await b.cursors.put("t00000", 4)
        clock.advance(AGE)
        stale = (await client.get("/")).text  # served from the old view, then refreshed
        assert _rows(stale)[0] == "t00000" and calls["status.attention"] == 2
        fresh = (await client.get("/")).text
        assert "t00000" not in _rows(fresh) and calls["status.attention"] == 2
        assert 'id="figures-at"' in fresh


async def test_a_view_nobody_looked_at_for_a_while_is_read_before_the_page() -> None:
    async with alone(30) as (client, _data, (b, calls), clock):
        assert _rows((await client.get("/")).text)[0] == "t00000"
        await b.cursors.put("t00000", 4)
        clock.advance(WAIT_AFTER * AGE)
        assert "t00000" not in _rows((await client.get("/")).text)  # read first, then shown
        assert calls["status.attention"] == 2


async def test_loads_that_find_no_view_wait_for_one_read_not_their_own() -> None:
    async with alone(30) as (client, _data, (_b, calls), _clock):
        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(client.get, "/")
        assert calls["status.attention"] == 1


async def test_pages_past_the_view_are_read_for_their_own_load() -> None:
    async with alone(VIEW_PAGES * PAGE_SIZE * 3 + 3 * PAGE_SIZE) as (client, _data,
                                                                     (_b, calls), _clock):
        last = (await client.get("/", params={"page": str(VIEW_PAGES)})).text
        assert len(_rows(last)) == PAGE_SIZE and calls["status.attention"] == 1
        past = (await client.get("/", params={"page": str(VIEW_PAGES + 1)})).text
        assert len(_rows(past)) == PAGE_SIZE and calls["status.attention"] == 2
        assert _rows(past)[0] not in _rows(last)  # the page after, not the view's last again


async def test_a_refresh_that_fails_keeps_the_view_until_it_is_too_old(
        caplog: pytest.LogCaptureFixture) -> None:
    async with alone(30) as (client, data, _board_calls, clock):
        assert (await client.get("/")).status_code == 200
        assert data.alone is not None
        real = data.alone.status.attention

        async def down(_offset: int, _limit: int) -> Any:
            raise StoreUnavailable("injected: board_event_counters unreachable")

        data.alone.status.attention = down  # type: ignore[method-assign]
        clock.advance(AGE)
        caplog.set_level(logging.WARNING, logger="board_outbox")
        assert (await client.get("/")).status_code == 200  # the old view; its refresh fails
        assert [r.getMessage() for r in caplog.records
                if "injected" in r.getMessage()] != []
        clock.advance(WAIT_AFTER * AGE)
        gone = await client.get("/")
        assert gone.status_code == 503 and "board_event_counters unreachable" in gone.text
        data.alone.status.attention = real  # type: ignore[method-assign]
        assert (await client.get("/")).status_code == 200


async def test_a_read_that_fails_among_concurrent_ones_costs_the_page_its_503() -> None:
    """The page's independent reads run at once; the one that fails makes the page's 503 (the
    store's own error), not an exception group's 500."""
    async with alone(30) as (client, data, _board_calls, _clock):
        assert data.stores.members is not None

        async def down(_now: float) -> Any:
            raise StoreUnavailable("injected: board_outbox_members unreachable")

        data.stores.members.live = down  # type: ignore[method-assign]
        for path in ("/", "/tenants/t00001"):
            r = await client.get(path)
            assert r.status_code == 503 and "members unreachable" in r.text, path


async def test_beside_a_replica_its_status_is_sorted_once_per_refresh(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from board_outbox.service.runtime import Service
    from board_outbox.surface.console import data as data_module

    _b, stores, _calls = await _board(300)
    cfg = load_config(env={})
    service = Service(stores, cfg)
    service.status_enabled = True
    await service.refresh_status()
    sorts: list[int] = []
    real = data_module.sorted_view

    def counted(every: Any, at: float, read_at: float) -> Any:
        sorts.append(len(every))
        return real(every, at, read_at)

    monkeypatch.setattr(data_module, "sorted_view", counted)
    console = ConsoleData(stores, cfg, service)
    first = await console.overview()
    second = await console.overview(2)
    assert sorts == [300] and first.tenants[0].tenant_id == "t00000"
    assert len(second.tenants) == 10 and (second.total, second.listed) == (300, 110)
    await service.refresh_status()  # a new status: sorted again, once
    await console.overview()
    await console.overview()
    assert sorts == [300, 300]


async def test_beside_a_replica_the_store_view_is_read_only_until_its_status_is_there() -> None:
    """A replica's console loaded before the replica's first metrics refresh reads the view in
    the store; once the replica's status is there, the pages come from it and that view is
    never read again, however old it gets."""
    from board_outbox.service.runtime import Service

    _b, stores, calls = await _board(30)
    cfg = load_config(env={}, service={"metrics_interval_seconds": AGE})
    service = Service(stores, cfg)
    service.status_enabled = True
    app = build_console(stores, cfg, service)
    data: ConsoleData = app.state.console
    clock = ManualClock(1000.0)
    assert data.alone is not None
    data.alone.clock = clock.now
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as client:
        assert (await client.get("/")).status_code == 200  # no status yet: the store's view
        assert calls["status.attention"] == 1
        await service.refresh_status()
        clock.advance(WAIT_AFTER * AGE)
        for _ in range(3):
            assert _rows((await client.get("/")).text)[0] == "t00000"
        assert calls["status.attention"] == 1


@pytest.mark.live_mongo
async def test_alone_on_the_wire_page_loads_send_one_aggregate_per_view(live_uri: str) -> None:
    """On the wire server, counted in the commands the console's client sends: five loads of
    the overview and its second page within one interval send one aggregate over the
    counters, and the pages and totals are cut right from it."""
    import uuid

    from pymongo import AsyncMongoClient, monitoring

    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo import ensure_schema, mongo_stores

    class Sent(monitoring.CommandListener):
        def __init__(self) -> None:
            self.names: list[str] = []

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            self.names.append(f"{event.command_name} {event.command.get(event.command_name)}")

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    sent = Sent()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(live_uri, event_listeners=[sent])
    name = f"board_outbox_test_{uuid.uuid4().hex[:10]}"
    try:
        db = client[name]
        await ensure_schema(db)
        await db["board_event_counters"].insert_many(
            [{"_id": f"t{i:03d}", "seq": 3} for i in range(150)])
        await db["trigger_cursors"].insert_many(
            [{"_id": f"t{i:03d}", "seq": 1 if i < 120 else 3} for i in range(150)])
        app = build_console(mongo_stores(db, MemoryLauncher()),
                            load_config(env={}, service={"metrics_interval_seconds": 60}))
        sent.names.clear()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://127.0.0.1") as http:
            pages = [(await http.get(path)).text
                     for path in ("/", "/?page=2", "/", "/?page=2", "/")]
        assert sent.names.count("aggregate board_event_counters") == 1, sent.names
        assert len(_rows(pages[0])) == PAGE_SIZE and len(_rows(pages[1])) == 20
        assert 'id="behind-count">120<' in pages[-1]
    finally:
        await client.drop_database(name)
        await client.close()
