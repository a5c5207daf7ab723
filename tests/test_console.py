"""The operator's web console (issue 25) over HTTP, on a running service (memory backend): the
pages, the read-only default, the login, CSRF and origin checks, and an audited replay. The
browser tests (``test_console_browser.py``) drive the same pages in Chromium over the wire."""

from __future__ import annotations

import random
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlencode

import anyio
import httpx
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card, EventSnapshot
from board_outbox.model.errors import ConfigError
from board_outbox.model.rows import ErrorEntry, TraceContext, new_launch_row
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.surface.console import build_console
from board_outbox.surface.http import open_ops_server

pytestmark = pytest.mark.anyio

T = "acme"
TOKEN = "s3cret-admin-token-for-tests"
TRACE = "0af7651916cd43dd8448eb211c80319c"


async def _parked_row(backend: MemoryBackend, seq: int = 1) -> str:
    """A launch row parked as a dead-letter, as the worker leaves one."""
    now = time.time()
    ev = EventSnapshot(seq=seq, type="card.created", card_id="c", at=now)
    row = new_launch_row(T, ev, Subscription(sub_id="s", tenant_id=T, bot="b"), now=now)
    row.state = "failed"
    row.attempts = 3
    row.errors = [ErrorEntry(attempt=i, at=now + i, error=f"bot runner answered 503 <#{i}>")
                  for i in (1, 2, 3)]
    row.trace = TraceContext(traceparent=f"00-{TRACE}-b7ad6b7169203331-01")
    await backend.outbox.upsert_rows([row])
    return row.row_key


@asynccontextmanager
async def console(admin_token: str = "", jaeger: str = "") -> AsyncIterator[
        tuple[MemoryBackend, httpx.AsyncClient, str]]:
    backend = MemoryBackend()
    await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await backend.board.put(Card(tenant_id=T, card_id="c"))
    key = await _parked_row(backend)
    cfg = load_config(env={}, tail={"poll_interval_seconds": 0.1},
                      ui={"enabled": True, "admin_token": admin_token, "jaeger_url": jaeger},
                      service={"metrics_interval_seconds": 0.05})
    service = Service(backend.stores(), cfg, rng=random.Random(1))
    async with open_ops_server(service, "127.0.0.1", 0,
                               ui=build_console(service.stores, cfg, service)) as server, \
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as client, \
            anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        try:
            yield backend, client, key
        finally:
            service.stop()


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m, "no CSRF token in the page"
    return m.group(1)


def origin(client: httpx.AsyncClient) -> dict[str, str]:
    return {"Origin": str(client.base_url).rstrip("/")}


async def login(client: httpx.AsyncClient, token: str = TOKEN) -> httpx.Response:
    page = await client.get("/ui/login")
    return await client.post("/ui/login", data={"csrf": csrf_of(page.text), "token": token,
                                                "who": "ana"}, headers=origin(client))


async def test_pages_render_the_store_and_are_read_only_by_default() -> None:
    async with console(jaeger="http://jaeger:16686/") as (_backend, client, key):
        home = await client.get("/ui/")
        assert home.status_code == 200 and 'http-equiv="refresh"' in home.text
        assert f'data-tenant="{T}"' in home.text and "read-only" in home.text
        assert 'id="latency"' in home.text  # this replica's histogram, beside a service
        tenant = await client.get(f"/ui/tenants/{T}")
        assert tenant.status_code == 200 and "bot runner answered 503 &lt;#3&gt;" in tenant.text
        assert "board-reflect" in tenant.text  # the read-model generations
        dls = await client.get("/ui/dead-letters", params={"tenant": T, "sub": "s", "since": "7d"})
        assert f'data-row="{key}"' in dls.text and 'type="checkbox"' not in dls.text
        assert "Replay selected" not in dls.text
        other = await client.get("/ui/dead-letters", params={"sub": "nope"})
        assert f'data-row="{key}"' not in other.text
        bad = await client.get("/ui/dead-letters", params={"since": "yesterday-ish"})
        assert bad.status_code == 400 and "is not a time" in bad.text
        row = await client.get(f"/ui/rows/{key}")
        assert row.status_code == 200 and f'href="http://jaeger:16686/trace/{TRACE}"' in row.text
        assert 'id="replay-row"' not in row.text
        # what holds it: the dead-letter's last error and the replay (issue 33, item 4)
        assert 'data-hold="failed"' in row.text and "bot runner answered 503 &lt;#3&gt;" in row.text
        assert 'data-moment="attempt_failed"' in row.text
        assert (await client.get("/ui/rows/acme/9/sub/none")).status_code == 404
        assert (await client.get("/ui/rows/acme/nine/sub/s")).status_code == 404
        assert (await client.get("/ui/tenants/nobody")).status_code == 404
        # a forged POST on a console without a token: refused, nothing changes
        forged = await client.post("/ui/replay", data={"csrf": csrf_of(dls.text), "key": key},
                                   headers=origin(client))
        assert forged.status_code == 403 and "read-only" in forged.text
        assert (await _backend.outbox.get(key)).state == "failed"  # type: ignore[union-attr]
        assert (await client.get("/healthz")).status_code == 200  # the probes still there


async def test_replay_needs_login_csrf_and_same_origin_and_is_audited() -> None:
    async with console(admin_token=TOKEN) as (backend, client, key):
        page = await client.get("/ui/dead-letters")
        token = csrf_of(page.text)
        form = {"csrf": token, "key": key}
        # not logged in: refused even with a good CSRF token
        r = await client.post("/ui/replay", data=form, headers=origin(client))
        assert r.status_code == 403 and "log in" in r.text
        wrong = await login(client, token="not-the-token-at-all")
        assert wrong.status_code == 403 and "not the admin token" in wrong.text
        ok = await login(client)
        assert ok.status_code == 303
        page = await client.get("/ui/dead-letters")
        assert 'type="checkbox"' in page.text and 'id="mode-admin"' in page.text
        form["csrf"] = token = csrf_of(page.text)
        # logged in, but no CSRF token / another one / another origin: refused
        for data, headers in (({"key": key}, origin(client)),
                              ({"key": key, "csrf": "x" * 43}, origin(client)),
                              (form, {"Origin": "http://evil.example"}),
                              (form, {"Sec-Fetch-Site": "cross-site"})):
            r = await client.post("/ui/replay", data=data, headers=headers)
            assert r.status_code == 403, (data, headers)
        assert (await backend.outbox.get(key)).state == "failed"  # type: ignore[union-attr]
        # the confirmation says what will happen and changes nothing
        confirm = await client.post("/ui/replay/confirm", data=form, headers=origin(client))
        assert confirm.status_code == 200 and "go back to pending" in confirm.text
        assert "console:ana" in confirm.text
        assert (await backend.outbox.get(key)).state == "failed"  # type: ignore[union-attr]
        done = await client.post("/ui/replay", data=form, headers=origin(client))
        assert done.status_code == 200 and "Replayed 1 of 1" in done.text
        row = await backend.outbox.get(key)
        assert row is not None and row.state in ("pending", "claimed", "done")
        assert [(a.action, a.by) for a in row.audit] == [("replay", "console:ana")]
        assert len(row.errors) == 3  # the history is kept
        # replaying it again: left alone, said so
        again = await client.post("/ui/replay", data=form, headers=origin(client))
        assert "Replayed 0 of 1" in again.text and "Left alone" in again.text
        # logged out: refused again
        await client.post("/ui/logout", data={"csrf": token}, headers=origin(client))
        r = await client.post("/ui/replay/confirm", data=form, headers=origin(client))
        assert r.status_code == 403


async def test_a_selection_is_bounded_and_bodies_are_limited() -> None:
    async with console(admin_token=TOKEN) as (_backend, client, _key):
        await login(client)
        token = csrf_of((await client.get("/ui/dead-letters")).text)
        many = [("csrf", token)] + [("key", f"{T}/{i}/sub/s") for i in range(600)]
        r = await client.post("/ui/replay/confirm", content=urlencode(many).encode(), headers={
            **origin(client), "Content-Type": "application/x-www-form-urlencoded"})
        assert r.status_code == 400  # more fields than a selection may have
        huge = await client.post("/ui/replay", content=b"key=" + b"x" * 100_000, headers={
            **origin(client), "Content-Type": "application/x-www-form-urlencoded"})
        assert huge.status_code == 413


def test_ui_settings_are_validated() -> None:
    ui = load_config(env={}).ui
    assert (ui.enabled, ui.host, ui.port, ui.admin_token) == (False, "127.0.0.1", 9465, "")
    with pytest.raises(ConfigError, match=r"ui\.admin_token: 5 characters, at least 16"):
        load_config(env={}, ui={"admin_token": "short"})
    with pytest.raises(ConfigError, match=r"ui\.jaeger_url"):
        load_config(env={}, ui={"jaeger_url": "jaeger:16686"})
    cfg = load_config(env={"BOARD_OUTBOX_UI__ENABLED": "true"})
    assert cfg.ui.enabled is True


async def test_a_store_that_fails_costs_the_page_not_the_console() -> None:
    from board_outbox.model.errors import StoreUnavailable

    async with console() as (backend, client, key):
        real = backend.outbox.get

        async def down(_key: str) -> object:
            raise StoreUnavailable("injected: trigger_effects unreachable")

        backend.outbox.get = down  # type: ignore[method-assign,assignment]
        r = await client.get(f"/ui/rows/{key}")
        assert r.status_code == 503 and "injected: trigger_effects unreachable" in r.text
        backend.outbox.get = real  # type: ignore[method-assign]
        assert (await client.get(f"/ui/rows/{key}")).status_code == 200


async def test_a_malformed_row_costs_only_itself_in_the_console() -> None:
    """A hostile row document (attempts a string, errors not a list): its own page says it
    cannot be read, and what becomes of it (issue 33: explained as ``malformed``); the
    dead-letter list and the tenant page still show every other row."""
    async with console() as (backend, client, key):
        backend.outbox.insert_raw({"tenant_id": T, "row_key": f"{T}/99/sub/s", "seq": 99,
                                   "kind": "launch", "sub_id": "s", "state": "failed",
                                   "attempts": "many", "errors": "boom", "updated_at": time.time()})
        listing = await client.get("/ui/dead-letters")
        assert listing.status_code == 200 and f'data-row="{key}"' in listing.text
        assert (await client.get(f"/ui/tenants/{T}")).status_code == 200
        bad = await client.get(f"/ui/rows/{T}/99/sub/s")
        assert bad.status_code == 200 and "malformed effect row" in bad.text
        assert 'data-hold="malformed"' in bad.text
        assert (await client.get("/ui/")).status_code == 200


async def test_a_planted_trace_id_is_never_shown_or_linked() -> None:
    """Issue 30: a row's trace context is data another writer may have planted; the row page
    shows and links into the tracing UI only a W3C trace id (the exemplars' check), and a
    planted one (``0x…``, a newline, upper case, all zeros) as none recorded."""
    from tests.test_bad_data import PLANTED_TRACE_IDS

    backend = MemoryBackend()
    cfg = load_config(env={}, ui={"jaeger_url": "http://jaeger:16686"})
    app = build_console(backend.stores(), cfg)
    now = time.time()
    keys = {}
    for seq, trace in enumerate([TRACE, *PLANTED_TRACE_IDS], start=1):
        row = new_launch_row(T, EventSnapshot(seq=seq, type="card.created", card_id="c", at=now),
                             Subscription(sub_id="s", tenant_id=T, bot="b"), now=now)
        row.trace = TraceContext(traceparent=f"00-{trace}-b7ad6b7169203331-01")
        await backend.outbox.upsert_rows([row])
        keys[trace] = row.row_key
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as client:
        good = (await client.get(f"/rows/{keys.pop(TRACE)}")).text
        assert f'id="trace" href="http://jaeger:16686/trace/{TRACE}"' in good
        for trace, key in keys.items():
            page = await client.get(f"/rows/{key}")
            assert page.status_code == 200, trace
            assert 'id="trace"' not in page.text and "none recorded" in page.text, repr(trace)


def test_console_command_serves_the_pages_alone_and_a_port_in_use_is_exit_2(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from tests.test_ops import free_port

    port = free_port()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[store]\nbackend = "memory"\n[ui]\nport = {port}\nadmin_token = "{TOKEN}"\n')
    cmd = [sys.executable, "-m", "board_outbox", "console", "--config", str(cfg)]
    with open(tmp_path / "console.log", "wb") as log_file:
        proc = subprocess.Popen(cmd, env=dict(os.environ), stdout=subprocess.DEVNULL,
                                stderr=log_file)
    try:
        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline and status != 200:
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/ui/", timeout=2).status_code
            except httpx.TransportError:
                time.sleep(0.1)
        assert status == 200, (tmp_path / "console.log").read_text()
        home = httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
        assert home.status_code == 307 and home.headers["location"] == "/ui/"
        page = httpx.get(f"http://127.0.0.1:{port}/ui/", timeout=2).text
        assert "standalone console" in page and "Log in" in page
        assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).status_code == 404
        second = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        assert second.returncode == 2, second.stderr
        assert second.stderr.count("\n") == 1 and "ui.port" in second.stderr
        assert "is already in use" in second.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_latency_quantiles_come_from_the_replicas_histogram() -> None:
    from board_outbox.surface.console.data import ConsoleData, Latency

    cfg = load_config(env={})
    service = Service(MemoryBackend().stores(), cfg)
    data = ConsoleData(service.stores, cfg, service)
    assert data.latency() == []
    for _ in range(60):
        service.metrics.prom.latency.labels("launch").observe(0.03)
    for _ in range(40):
        service.metrics.prom.latency.labels("launch").observe(20)
    service.metrics.prom.latency.labels("projection").observe(5000)  # past the last bucket
    assert data.latency() == [Latency("launch", 100, 0.05, 30.0),
                              Latency("projection", 1, float("inf"), float("inf"))]
    assert ConsoleData(service.stores, cfg).latency() is None  # standalone: no histogram


async def test_slow_console_pages_never_starve_the_probes() -> None:
    """The console has its own in-flight budget: with every console slot held by a store that
    does not answer, the next page is 503 and /healthz still answers 200."""
    from board_outbox.surface.http.app import UI_IN_FLIGHT

    async with console() as (backend, client, key):
        release = anyio.Event()
        real = backend.outbox.get

        async def slow(row_key: str) -> object:
            await release.wait()
            return await real(row_key)

        backend.outbox.get = slow  # type: ignore[method-assign,assignment]
        codes: list[int] = []

        async def open_row() -> None:
            codes.append((await client.get(f"/ui/rows/{key}")).status_code)

        async with anyio.create_task_group() as tg:
            for _ in range(UI_IN_FLIGHT):
                tg.start_soon(open_row)

            async def console_full() -> bool:
                return (await client.get("/ui/dead-letters")).status_code == 503

            with anyio.fail_after(10):
                while not await console_full():
                    await anyio.sleep(0.02)
            assert (await client.get("/healthz")).status_code == 200
            assert codes == []
            release.set()
        assert codes == [200] * UI_IN_FLIGHT
        assert (await client.get("/ui/dead-letters")).status_code == 200


async def test_a_selection_of_dead_letters_is_confirmed_then_replayed_together() -> None:
    async with console(admin_token=TOKEN) as (backend, client, first):
        second = await _parked_row(backend, seq=2)
        await login(client)
        listing = await client.get("/ui/dead-letters", params={"tenant": T})
        boxes = re.findall(r'name="key" value="([^"]+)"', listing.text)
        assert sorted(boxes) == sorted([first, second])
        form = [("csrf", csrf_of(listing.text)), ("key", first), ("key", second)]
        body = urlencode(form).encode()
        headers = {**origin(client), "Content-Type": "application/x-www-form-urlencoded"}
        confirm = await client.post("/ui/replay/confirm", content=body, headers=headers)
        assert "Replay 2 dead-letters?" in confirm.text
        assert confirm.text.count("go back to pending") == 2
        done = await client.post("/ui/replay", content=body, headers=headers)
        assert "Replayed 2 of 2" in done.text
        for key in (first, second):
            row = await backend.outbox.get(key)
            assert row is not None and [a.by for a in row.audit] == ["console:ana"]


async def test_the_charts_page_draws_the_series_and_the_overview_its_sparklines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33, item 6: ``/ui/charts`` draws the series every replica writes (SVG in the page,
    no script), the tenants most behind by name (a hostile one as text), and the overview's row
    of a tenant behind carries its last hour as a sparkline; a series store that fails costs
    the sparklines, not the overview."""
    import xml.etree.ElementTree as ET

    from board_outbox.model.errors import StoreUnavailable
    from board_outbox.model.series import MINUTE, SeriesCounts, SeriesPoint, minute_of

    hostile = "<img src=x onerror=alert(1)>"
    async with console() as (backend, client, _key):
        empty = await client.get("/ui/charts")
        assert empty.status_code == 200 and 'id="no-series"' in empty.text
        if time.time() % MINUTE > MINUTE - 5:  # no minute may end between planting and reading
            await anyio.sleep(MINUTE - time.time() % MINUTE + 0.1)
        last = minute_of(time.time()) - MINUTE
        for i, minute in enumerate(range(last - 4 * MINUTE, last + MINUTE, MINUTE)):
            lag = ((hostile, 50 - i), (T, 10 * (i + 1)))
            await backend.series.flush(SeriesPoint(
                minute=minute, replica="r-planted",
                counts=SeriesCounts(materialized=7 * (i + 1), done=6 * (i + 1), dead=i),
                base=SeriesCounts(materialized=7 * i, done=6 * i, dead=max(0, i - 1)),
                lag_total=sum(n for _t, n in lag), behind=2, lag=lag, listed=2), minute + 3600)
        page = await client.get("/ui/charts", params={"hours": "1"})
        assert page.status_code == 200 and 'id="no-series"' not in page.text
        assert "<script" not in page.text and hostile not in page.text
        assert 'id="total-materialized">35<' in page.text  # 5 minutes of 7
        assert 'id="nav-charts"' in page.text
        figures = dict(re.findall(r'<figure id="([\w-]+)" class="chart">(.*?)</figure>',
                                  page.text, re.S))
        assert set(figures) == {"chart-throughput", "chart-dead", "chart-lag", "chart-tenant-lag"}
        svg = ET.fromstring(figures["chart-tenant-lag"])
        ns = "{http://www.w3.org/2000/svg}"
        labels = [p.get("data-label") for p in svg.iter(f"{ns}path")]
        assert labels == [T, hostile]  # most behind now first (50, 46); the hostile id as text
        throughput = ET.fromstring(figures["chart-throughput"])
        assert "events materialized: newest 7, peak 7" in (throughput.findtext(f"{ns}desc") or "")

        home = await client.get("/ui/")
        row = re.search(rf'<tr data-tenant="{T}".*?</tr>', home.text, re.S)
        assert row is not None and '<svg xmlns="http://www.w3.org/2000/svg" class="spark"' in \
            row.group(0) and "newest 50, peak 50" in row.group(0)

        async def down(*_a: object, **_k: object) -> object:
            raise StoreUnavailable("injected: trigger_series unreachable")

        from board_outbox.surface.console import trends

        monkeypatch.setattr(backend.series, "read", down)
        monkeypatch.setattr(trends, "SPARK_CACHE_SECONDS", 0.0)  # read again, not the last one
        home = await client.get("/ui/")
        assert home.status_code == 200 and f'data-tenant="{T}"' in home.text
        assert "<svg" not in home.text  # no sparkline, the rest of the page as ever
        assert (await client.get("/ui/charts")).status_code == 503  # that page says so
