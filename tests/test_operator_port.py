"""The operator port's guards over a real socket (issues 30, 32): the documented 16 KiB head
limit holds whatever the reads (431), a request body that stalls is cut (hypercorn's
``read_timeout``), and the ``Host`` header must name this port (DNS rebinding)."""

from __future__ import annotations

import logging

import anyio
import httpx
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.surface.http import open_ops_server
from tests.test_ops import _alive, _until_closed, raw_exchange, running, until

pytestmark = pytest.mark.anyio


def _get(path: str, host: str, extra: bytes = b"") -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: {host}\r\n".encode() + extra
            + b"Connection: close\r\n\r\n")


async def test_a_head_over_16_kib_is_431_however_it_arrives() -> None:
    service = Service(MemoryBackend().stores(), load_config(env={}))
    async with running(service) as (server, client):
        await until(lambda: _alive(client))
        for kib in (17, 30, 60):
            big = b"X-Big: " + b"v" * (kib * 1024) + b"\r\n"
            got = await raw_exchange(server.port, _get("/healthz", "127.0.0.1", big))
            assert got.startswith(b"HTTP/1.1 431"), (kib, got[:80])
            long_path = await raw_exchange(server.port, _get("/healthz?" + "q" * kib * 1024,
                                                             "127.0.0.1"))
            assert long_path.startswith(b"HTTP/1.1 431"), (kib, long_path[:80])
        # just under the limit: answered
        fits = b"X-Big: " + b"v" * (15 * 1024) + b"\r\n"
        got = await raw_exchange(server.port, _get("/healthz", "127.0.0.1", fits))
        assert got.startswith(b"HTTP/1.1 200"), got[:80]


async def test_a_request_body_that_stalls_is_cut(monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Headers sent whole, then a body that stops after a few bytes: the server closes the
    connection after ``READ_TIMEOUT`` (made short here), well before its keep-alive timeout
    could, and serves the next client."""
    from board_outbox.surface.http import server as http_server

    monkeypatch.setattr(http_server, "READ_TIMEOUT", 1)
    assert http_server.KEEP_ALIVE >= 5
    service = Service(MemoryBackend().stores(), load_config(
        env={}, ui={"enabled": True, "admin_token": "s3cret-admin-token-for-tests"}))
    from board_outbox.surface.console import build_console

    ui = build_console(service.stores, service.config, service)
    async with open_ops_server(service, "127.0.0.1", 0, ui=ui) as server, \
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as client:
        async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
            await stream.send(b"POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              b"Content-Type: application/x-www-form-urlencoded\r\n"
                              b"Content-Length: 1000\r\n\r\ncsrf=abc&tok")
            started = anyio.current_time()
            with anyio.fail_after(4):  # READ_TIMEOUT 1 s; keep-alive would take 5 s
                got = await _until_closed(stream)
            assert anyio.current_time() - started < 4
        # cut while the login form waited for its body: no answer, or a 408 at most
        assert got == b"" or got.startswith(b"HTTP/1.1 408"), got[:80]
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert (await client.get("/healthz")).status_code in (200, 503)


async def test_the_host_header_must_name_this_port() -> None:
    service = Service(MemoryBackend().stores(), load_config(
        env={}, ui={"enabled": True}, service={"allowed_hosts": ["ops.example.internal"]}))
    from board_outbox.surface.console import build_console

    ui = build_console(service.stores, service.config, service)
    async with open_ops_server(service, "127.0.0.1", 0, ui=ui) as server:
        port = server.port
        for path in ("/metrics", "/ui/", "/healthz"):
            for host in ("rebind.attacker.example", f"rebind.attacker.example:{port}",
                         f"localhost.attacker.example:{port}", f"10.1.2.3:{port}", ""):
                got = await raw_exchange(port, _get(path, host))
                assert got.startswith(b"HTTP/1.1 400"), (path, host, got[:80])
            for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}",
                         f"LOCALHOST.:{port}", f"ops.example.internal:{port}"):
                got = await raw_exchange(port, _get(path, host))
                assert not got.startswith(b"HTTP/1.1 400"), (path, host, got[:80])


async def test_bound_to_every_interface_any_address_is_a_host_but_no_other_name() -> None:
    from board_outbox.surface.http.guards import AllowedHosts

    every = AllowedHosts((), "0.0.0.0")
    assert every.allows("10.1.2.3:9464") and every.allows("[fd00::1]:9464")
    assert every.allows("localhost:9464") and not every.allows("rebind.example:9464")
    one = AllowedHosts(("Ops.Example.",), "10.0.0.5")
    assert one.allows("10.0.0.5:9464") and one.allows("ops.example:1")
    assert not one.allows("10.0.0.6:9464") and not one.allows(None)
    assert AllowedHosts(("*",)).allows("anything.example")


def test_allowed_hosts_are_validated() -> None:
    from board_outbox.model.errors import ConfigError

    for bad in ("", "a b", "http://x", "x/y"):
        with pytest.raises(ConfigError, match=r"service\.allowed_hosts"):
            load_config(env={}, service={"allowed_hosts": [bad]})
