"""The operator surface (O1, O2): /healthz, /readyz, /metrics, stall detection, their settings."""

from __future__ import annotations

import logging
import random
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.model.clock import ManualClock
from board_outbox.model.errors import ConfigError, StoreUnavailable
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.health import StallDetector, tenant_status
from board_outbox.service.runtime import Service
from board_outbox.surface.http import open_ops_server
from board_outbox.surface.http.app import MAX_IN_FLIGHT
from board_outbox.surface.http.checks import PROBE_TENANT
from board_outbox.surface.http.server import OpsServer

T = "t1"


# --- settings -------------------------------------------------------------------------------


def test_endpoint_settings_default_and_from_the_environment() -> None:
    cfg = load_config(env={})
    assert (cfg.service.http_host, cfg.service.http_port) == ("127.0.0.1", 9464)
    cfg = load_config(env={"BOARD_OUTBOX_SERVICE__HTTP_PORT": "0",
                           "BOARD_OUTBOX_SERVICE__HTTP_HOST": "0.0.0.0"})
    assert (cfg.service.http_host, cfg.service.http_port) == ("0.0.0.0", 0)
    with pytest.raises(ConfigError, match=r"service\.http_port"):
        load_config(env={"BOARD_OUTBOX_SERVICE__HTTP_PORT": "70000"})


def test_stall_seconds_is_validated() -> None:
    assert load_config(env={}).tail.stall_seconds == 120.0
    with pytest.raises(ConfigError, match=r"tail\.stall_seconds"):
        load_config(env={}, tail={"stall_seconds": -1})
    with pytest.raises(ConfigError, match=r"tail.stall_seconds \(20\) must exceed tail.young_gap"):
        load_config(env={}, tail={"stall_seconds": 20})


def test_invalid_stall_seconds_on_the_command_line_is_one_line_exit_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[tail]\nstall_seconds = 0\n")
    proc = subprocess.run([sys.executable, "-m", "board_outbox", "run", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "tail.stall_seconds" in proc.stderr


# --- stall detection (no sleeping: the caller passes the time) ------------------------------


def test_lagging_but_moving_is_healthy_behind_and_still_is_stalled_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    d = StallDetector(stall_seconds=60)
    caplog.set_level(logging.WARNING, logger="board_outbox.health")
    # lagging but the cursor moves every 30 s: never stalled, however long it lags
    for i in range(10):
        assert d.observe(T, cursor=i * 5, behind=True, now=1000.0 + 30 * i) == 0.0
    # cursor stuck at 45 since t=1270
    assert d.observe(T, cursor=45, behind=True, now=1300.0) == 0.0
    assert d.observe(T, cursor=45, behind=True, now=1329.0) == 0.0
    assert d.observe(T, cursor=45, behind=True, now=1330.0) == 60.0
    assert d.observe(T, cursor=45, behind=True, now=1400.0) == 130.0
    stalls = [r for r in caplog.records if "stalled:" in r.getMessage()]
    assert len(stalls) == 1 and "tenant t1 stalled" in stalls[0].getMessage()
    # caught up: healthy again, and a new stall is logged again
    assert d.observe(T, cursor=50, behind=False, now=1401.0) == 0.0
    assert any("no longer stalled" in r.getMessage() for r in caplog.records)
    d.observe(T, cursor=50, behind=True, now=1500.0)
    assert d.observe(T, cursor=50, behind=True, now=1600.0) == 100.0
    assert len([r for r in caplog.records if "stalled:" in r.getMessage()]) == 2
    # a tenant that is not behind is never stalled, even with a still cursor
    assert d.observe("t2", cursor=7, behind=False, now=0.0) == 0.0
    assert d.observe("t2", cursor=7, behind=False, now=10_000.0) == 0.0


# --- the endpoints over a running service (memory backend) ----------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _board(backend: MemoryBackend) -> None:
    await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await backend.board.put(Card(tenant_id=T, card_id="c"))


@asynccontextmanager
async def running(service: Service) -> AsyncIterator[tuple[OpsServer, httpx.AsyncClient]]:
    async with open_ops_server(service, "127.0.0.1", 0) as server, \
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as client, \
            anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        try:
            yield server, client
        finally:
            service.stop()


async def until(cond: object, timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not await cond():  # type: ignore[operator]
            await anyio.sleep(0.02)


@pytest.mark.anyio
async def test_healthz_readyz_and_metrics_on_a_running_service() -> None:
    backend = MemoryBackend()
    await _board(backend)
    cfg = load_config(env={}, tail={"seed": "earliest", "poll_interval_seconds": 0.1},
                      service={"metrics_interval_seconds": 0.05})
    service = Service(backend.stores(), cfg, rng=random.Random(1))
    attempts = {"n": 0}

    def fail_first(_r: object) -> bool:  # the first launch attempt fails and is retried
        attempts["n"] += 1
        return attempts["n"] == 1

    backend.launcher.fail = fail_first
    async with running(service) as (_server, client):
        async def ready() -> bool:
            return (await client.get("/readyz")).status_code == 200

        await until(ready)  # the stream is open: the events below wake the tail through it
        for _ in range(3):
            await backend.events.emit(T, "card.created", "c")
        r = await client.get("/healthz")
        assert r.status_code == 200 and r.json() == {"status": "ok", "failing": {}, "degraded": {},
                                                     "stalled_tenants": [], "stalled_count": 0}
        r = await client.get("/readyz")
        assert r.json() == {"status": "ready", "failing": {}, "degraded": {}, "stalled_tenants": [],
                            "stalled_count": 0}

        async def settled() -> bool:
            return backend.outbox.all_docs() != [] and all(
                d["state"] == "done" for d in backend.outbox.all_docs())

        await until(settled)
        await anyio.sleep(0.2)  # one more metrics refresh
        r = await client.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        families = {f.name: f for f in text_string_to_metric_families(r.text)}
        assert all(name.startswith("board_outbox_") for name in families)
        for name in ("board_outbox_tail_lag_events", "board_outbox_tail_lag_seconds",
                     "board_outbox_oldest_pending_age_seconds", "board_outbox_lease_steals",
                     "board_outbox_cas_lost", "board_outbox_dead_letters",
                     "board_outbox_dead_letter_rows", "board_outbox_stream_reopens",
                     "board_outbox_tenant_stalled", "board_outbox_rows", "board_outbox_wakes",
                     "board_outbox_materialize_to_done_seconds", "board_outbox_attempts"):
            assert name in families, name
        lag = {s.labels["tenant_id"]: s.value for s in families["board_outbox_tail_lag_events"].samples}
        assert lag == {T: 0.0}
        rows = {s.labels["state"]: s.value for s in families["board_outbox_rows"].samples}
        # 3 launches + 3 projection rows; the live states and the dead-letters read 0, not absent
        assert rows == {"done": 6.0, "pending": 0.0, "claimed": 0.0, "failed": 0.0, "coalesced": 0.0,
                        "cancelled": 0.0}
        done = [s for s in families["board_outbox_materialize_to_done_seconds"].samples
                if s.name.endswith("_count")]
        assert sum(s.value for s in done) == 6.0
        retried = {s.labels["outcome"]: s.value for s in families["board_outbox_worker_rows"].samples}
        assert retried["retried"] == 1.0
        wakes = {s.labels["source"] for s in families["board_outbox_wakes"].samples
                 if s.name == "board_outbox_wakes_total"}
        assert {"poll", "stream"} <= wakes
        assert (await client.get("/nope")).status_code == 404
        assert (await client.post("/metrics")).status_code == 405


@pytest.mark.anyio
async def test_a_stalled_tenant_shows_in_healthz_and_metrics_and_never_fails_a_probe() -> None:
    """A stalled tenant is every replica's (they share the store): failing /readyz on it took
    every pod out of service at once and hung the rollout of the fix. It is named in both
    probes' ``degraded`` detail and in ``board_outbox_tenant_stalled``; both probes stay 200,
    and another tenant keeps flowing meanwhile."""
    backend = MemoryBackend()
    await _board(backend)
    await backend.subs.put(Subscription(sub_id="s2", tenant_id="t2", bot="b"))
    await backend.board.put(Card(tenant_id="t2", card_id="c"))
    clock = ManualClock()
    cfg = load_config(env={}, tail={"seed": "earliest", "poll_interval_seconds": 0.05,
                                    "stall_seconds": 60},
                      service={"metrics_interval_seconds": 0.02})
    service = Service(backend.stores(), cfg, clock=clock, rng=random.Random(1))
    await backend.events.emit(T, "card.created", "c")
    # a seq allocated and never inserted: the tail waits behind the young gap, forever while the
    # manual clock does not move past young_gap_seconds -- but the stall clock does move
    await backend.events.allocate_seq(T)
    await backend.events.emit(T, "card.created", "c")
    async with running(service) as (_server, client):

        async def caught_up_to_gap() -> bool:
            return await backend.cursors.get(T) == 1 and T in service.status

        await until(caught_up_to_gap)
        assert (await client.get("/healthz")).json()["status"] == "ok"  # behind, not for long yet
        clock.advance(29)  # young gap still young (30 s), cursor still for 29 s: healthy
        await anyio.sleep(0.1)
        assert (await client.get("/healthz")).json()["degraded"] == {}
        clock.advance(20)  # 49 s: the gap is old now and is stepped over: the cursor moves
        await until(lambda: _cursor_is(backend, 3))
        # now wedge the tenant's tail for real: its row writes fail, its cursor cannot move
        await backend.events.emit(T, "card.created", "c")
        real_upsert = backend.outbox.upsert_rows

        async def unavailable(rows: list[EffectRow], **kw: Any) -> object:
            if any(r.tenant_id == T for r in rows):
                raise StoreUnavailable("injected: trigger_effects unwritable")
            return await real_upsert(rows, **kw)

        backend.outbox.upsert_rows = unavailable  # type: ignore[method-assign,assignment]
        await anyio.sleep(0.1)
        clock.advance(61)

        async def stalled() -> bool:
            return (await client.get("/healthz")).json()["stalled_tenants"] == [T]

        await until(stalled)
        health = await client.get("/healthz")
        assert health.status_code == 200
        assert health.json() == {"status": "degraded", "failing": {},
                                 "degraded": {"tail": f"stalled tenants: {T}"},
                                 "stalled_tenants": [T], "stalled_count": 1}
        ready = await client.get("/readyz")
        assert ready.status_code == 200, ready.json()
        assert ready.json()["status"] == "ready" and ready.json()["stalled_tenants"] == [T]
        assert ready.json()["degraded"] == {"tail": f"stalled tenants: {T}"}
        text = (await client.get("/metrics")).text
        fam = {f.name: f for f in text_string_to_metric_families(text)}
        stall = {s.labels["tenant_id"]: s.value for s in fam["board_outbox_tenant_stalled"].samples}
        assert stall == {T: 1.0, "t2": 0.0}
        # the other tenant is served meanwhile
        await backend.events.emit("t2", "card.created", "c")
        await until(lambda: _cursor_is(backend, 1, "t2"))
        backend.outbox.upsert_rows = real_upsert  # type: ignore[method-assign]
        await until(lambda: _cursor_is(backend, 4))

        async def recovered() -> bool:
            return (await client.get("/healthz")).json()["status"] == "ok"

        await until(recovered)


async def _cursor_is(backend: MemoryBackend, n: int, tenant: str = T) -> bool:
    return await backend.cursors.get(tenant) == n


async def _ready(client: httpx.AsyncClient) -> bool:
    return (await client.get("/readyz")).status_code == 200


@pytest.mark.anyio
async def test_tenant_status_lag_in_events_and_seconds_and_oldest_pending() -> None:
    backend = MemoryBackend()
    await _board(backend)
    clock = ManualClock(start=10_000.0)
    cfg = load_config(env={}, tail={"seed": "earliest"})
    service = Service(backend.stores(), cfg, clock=clock, rng=random.Random(1))
    st = await tenant_status(backend.stores(), T, clock.now())
    assert (st.cursor, st.allocated_seq, st.lag_events, st.lag_seconds) == (0, 0, 0, 0.0)
    await backend.events.emit(T, "card.created", "c", at=9_990.0)
    await backend.events.emit(T, "card.created", "c", at=9_995.0)
    st = await tenant_status(backend.stores(), T, clock.now())
    assert (st.lag_events, st.lag_seconds, st.oldest_pending_age_seconds) == (2, 10.0, None)
    await service.tail.drain_all()
    clock.advance(7)
    st = await tenant_status(backend.stores(), T, clock.now())
    assert (st.cursor, st.lag_events, st.lag_seconds) == (2, 0, 0.0)
    # born claimed for this replica's worker (the hand-off): live, waiting 7 s
    assert st.oldest_pending_age_seconds == 7.0 and st.rows == {"claimed": 4}
    await service.worker.tick_any()
    st = await tenant_status(backend.stores(), T, clock.now())
    assert st.oldest_pending_age_seconds is None and st.rows == {"done": 4} and st.dead_letters == 0


# --- the HTTP server itself: HEAD, oversize requests, the in-flight limit ------------------


async def raw_exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` as is and read until the server closes the connection."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        out = b""
        with anyio.fail_after(10):
            while True:
                try:
                    out += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return out


@pytest.mark.anyio
async def test_head_is_answered_without_a_body() -> None:
    service = Service(MemoryBackend().stores(), load_config(env={}))
    async with running(service) as (server, client):
        await until(lambda: _alive(client))
        got = await raw_exchange(server.port, b"HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                              b"Connection: close\r\n\r\n")
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), got
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")[1:]
                          if line.lower().startswith(b"content-length:")))
        assert length > 0 and body == b""  # the length GET would send, and no body
        get = await client.get("/healthz")
        assert len(get.content) == length


async def _alive(client: httpx.AsyncClient) -> bool:
    return (await client.get("/healthz")).status_code == 200


@pytest.mark.anyio
async def test_oversize_requests_get_a_status_not_a_closed_socket() -> None:
    service = Service(MemoryBackend().stores(), load_config(env={}))
    async with running(service) as (server, client):
        await until(lambda: _alive(client))
        line = await raw_exchange(server.port, b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n"
                                                b"Host: 127.0.0.1\r\n\r\n")
        assert line.startswith(b"HTTP/1.1 431"), line[:80]
        headers = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 1000) for i in range(100))
        big = await raw_exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers
                                 + b"\r\n")
        assert big.startswith(b"HTTP/1.1 431"), big[:80]
        body = await client.post("/ui/replay", content=b"x" * 200_000)
        assert body.status_code == 413  # refused on its Content-Length, before any route
        declared = await raw_exchange(server.port, b"POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                   b"Content-Length: 10000000\r\n\r\n")
        assert declared.startswith(b"HTTP/1.1 413"), declared[:80]  # not read, not a reset
        garbage = await raw_exchange(server.port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n")
        assert garbage.startswith(b"HTTP/1.1 400"), garbage[:80]
        assert (await client.get("/healthz")).status_code == 200  # and it carries on


@pytest.mark.anyio
async def test_idle_and_trickling_connections_are_closed_by_the_server() -> None:
    """A connection that sends nothing, and one whose head trickles in a byte at a time, are
    closed by the server (keep-alive timeout): neither holds a descriptor for ever."""
    from board_outbox.surface.http.server import KEEP_ALIVE

    service = Service(MemoryBackend().stores(), load_config(env={}))
    closed: dict[str, bytes] = {}

    async def idle(port: int) -> None:
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            closed["idle"] = await _until_closed(stream)

    async def trickle(port: int) -> None:
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")

            async def drip() -> None:
                try:
                    while True:
                        await stream.send(b"X")
                        await anyio.sleep(0.5)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    return

            async with anyio.create_task_group() as tg:
                tg.start_soon(drip)
                closed["trickle"] = await _until_closed(stream)
                tg.cancel_scope.cancel()

    async with running(service) as (server, client):
        await until(lambda: _alive(client))
        with anyio.fail_after(KEEP_ALIVE * 4):  # a bound for the test, not a speed claim
            async with anyio.create_task_group() as tg:
                tg.start_soon(idle, server.port)
                tg.start_soon(trickle, server.port)
        assert closed == {"idle": b"", "trickle": b""}  # closed without a response
        assert (await client.get("/healthz")).status_code == 200


async def _until_closed(stream: anyio.abc.SocketStream) -> bytes:
    got = b""
    while True:
        try:
            got += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return got


@pytest.mark.anyio
async def test_requests_past_the_in_flight_limit_get_503_and_the_port_recovers() -> None:
    """A store that stops answering holds every /readyz in flight: past the limit the port
    answers 503 at once instead of piling up, and serves again once the store answers."""
    backend = MemoryBackend()
    service = Service(backend.stores(), load_config(env={}, store={"op_timeout_seconds": 20}))
    release = anyio.Event()
    real_get = service.stores.cursors.get

    async def slow_probe(tenant: str) -> int | None:
        if tenant == PROBE_TENANT:
            await release.wait()
        return await real_get(tenant)

    service.stores.cursors.get = slow_probe  # type: ignore[method-assign]
    async with running(service) as (server, _client):
        limits = httpx.Limits(max_connections=MAX_IN_FLIGHT + 10)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=30,
                                     limits=limits) as client:
            await until(lambda: _alive(client))
            codes: list[int] = []

            async def probe() -> None:
                codes.append((await client.get("/readyz")).status_code)

            async with anyio.create_task_group() as tg:
                for _ in range(MAX_IN_FLIGHT):
                    tg.start_soon(probe)
                await until(lambda: _busy(client))  # the next one is turned away at once
                extra = await client.get("/healthz")
                assert extra.status_code == 503 and extra.headers["retry-after"] == "1"
                assert codes == []  # the held ones are still waiting
                release.set()
            assert len(codes) == MAX_IN_FLIGHT and 503 not in codes
            assert (await client.get("/healthz")).status_code == 200


async def _busy(client: httpx.AsyncClient) -> bool:
    return (await client.get("/healthz")).status_code == 503


# --- binding ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_port_in_use_is_a_usage_error() -> None:
    from board_outbox.model.errors import UsageError

    service = Service(MemoryBackend().stores(), load_config(env={}))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=rf"service.http_port: 127.0.0.1:{port} is already in use"):
            async with open_ops_server(service, "127.0.0.1", port):
                pass


def test_run_serves_the_endpoints_and_a_port_in_use_is_one_line_exit_2(tmp_path: Path) -> None:
    import os

    port = free_port()
    cfg = tmp_path / "c.toml"
    cfg.write_text('[store]\nbackend = "memory"\n[tail]\npoll_interval_seconds = 0.1\n')
    env = {**os.environ, "BOARD_OUTBOX_SERVICE__HTTP_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "-m", "board_outbox", "run", "--config", str(cfg)],
                            env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline:
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code
                if status == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        assert status == 200
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        # a second replica on the same port: one line, exit 2
        second = subprocess.run(
            [sys.executable, "-m", "board_outbox", "run", "--config", str(cfg)],
            env=env, capture_output=True, text=True, timeout=30)
        assert second.returncode == 2, second.stderr
        assert second.stderr.count("\n") == 1 and "is already in use" in second.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=15)


@pytest.mark.anyio
async def test_the_operator_port_warns_when_bound_to_loopback_inside_kubernetes(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """kubelet probes a pod by its own address: a port on 127.0.0.1 fails every probe. The
    default stays loopback (a bare process exposes nothing); inside a pod one line says what
    to set."""
    service = Service(MemoryBackend().stores(), load_config(env={}))
    caplog.set_level(logging.WARNING, logger="board_outbox.http")
    async with open_ops_server(service, "127.0.0.1", 0):
        pass
    assert not [r for r in caplog.records if "Kubernetes" in r.getMessage()]
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    async with open_ops_server(service, "127.0.0.1", 0):
        pass
    lines = [r.getMessage() for r in caplog.records if "Kubernetes" in r.getMessage()]
    assert len(lines) == 1 and "service.http_host is 127.0.0.1" in lines[0]
