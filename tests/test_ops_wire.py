"""/readyz and /metrics over the wire server (O1): a store that stops answering turns /readyz 503
within the store op timeout, and a restarted one turns it back to 200."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from board_outbox.service.backends import open_backend
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.service.wireserver import WireServer, find_executable
from board_outbox.surface.http import open_ops_server

pytestmark = [pytest.mark.anyio, pytest.mark.live_mongo]

OP_TIMEOUT = 2.0


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[WireServer]:
    if find_executable() is None:
        pytest.skip("secantusd-py is not installed")
    server = WireServer(storage=str(tmp_path / "data"))
    server.start()
    yield server
    server.close()


async def test_readyz_turns_503_when_the_store_stops_and_200_after_restart(
    own_server: WireServer,
) -> None:
    cfg = load_config(env={}, store={
        "backend": "mongo", "uri": own_server.uri, "database": f"ops_{uuid.uuid4().hex[:8]}",
        "op_timeout_seconds": OP_TIMEOUT, "server_selection_timeout_seconds": OP_TIMEOUT,
        "connect_timeout_seconds": 1.0,
    }, tail={"poll_interval_seconds": 0.2}, service={"metrics_interval_seconds": 0.2})
    async with open_backend(cfg, ensure_schema=True) as stores:
        service = Service(stores, cfg, rng=random.Random(1))
        async with open_ops_server(service, "127.0.0.1", 0) as ops, \
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{ops.port}",
                                  timeout=OP_TIMEOUT * 3) as client, \
                anyio.create_task_group() as tg:
            tg.start_soon(service.run)

            async def status() -> int:
                return (await client.get("/readyz")).status_code

            with anyio.fail_after(20):
                while await status() != 200:
                    await anyio.sleep(0.1)
            families = {f.name for f in text_string_to_metric_families(
                (await client.get("/metrics")).text)}
            assert {"board_outbox_rows", "board_outbox_change_stream_open"} <= families

            await anyio.to_thread.run_sync(own_server.stop)
            stopped = time.monotonic()
            with anyio.fail_after(OP_TIMEOUT + 1.5):
                while (r := await client.get("/readyz")).status_code != 503:
                    await anyio.sleep(0.05)
            assert time.monotonic() - stopped <= OP_TIMEOUT + 1.5
            body = r.json()
            assert body["status"] == "not ready" and "store" in body["failing"], body
            assert (await client.get("/healthz")).status_code == 200  # the loops ride it out

            await anyio.to_thread.run_sync(own_server.start)
            with anyio.fail_after(30):
                while await status() != 200:
                    await anyio.sleep(0.2)
            service.stop()


# --- the operator port out of file descriptors (issue 20) ------------------------------------

FD_LIMIT = 96  # enough for the interpreter, the driver's pools and a few requests


def _low_fd_limit() -> None:  # preexec_fn: runs in the child before exec
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def _wait_http(url: str, want: int, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        try:
            status = httpx.get(url, timeout=2).status_code
            if status == want:
                return status
        except httpx.TransportError:
            status = None
        time.sleep(0.1)
    return status


def test_running_out_of_file_descriptors_on_the_operator_port_never_ends_the_service(
    live_uri: str, tmp_path: Path,
) -> None:
    """More idle connections than the process has descriptors: ``accept()`` fails with EMFILE.
    The service keeps running, says so in a few lines (not one traceback per failed accept),
    answers /healthz again once the connections are gone, and stops cleanly on SIGTERM."""
    import os
    import signal
    import socket
    import subprocess
    import sys

    from tests.test_ops import free_port

    port = free_port()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[store]\nbackend = "mongo"\nuri = "{live_uri}"\n'
                   f'database = "fds_{uuid.uuid4().hex[:8]}"\n'
                   f'[service]\nhttp_port = {port}\nlog_level = "INFO"\n'
                   '[tail]\npoll_interval_seconds = 0.2\n')
    env = {**os.environ, "BOARD_OUTBOX_SERVICE__HTTP_PORT": str(port)}
    log_path = tmp_path / "run.log"
    # stderr to a file: a pipe nobody reads would fill up and freeze the process under test
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "board_outbox", "run", "--config", str(cfg)],
                                env=env, stdout=subprocess.DEVNULL, stderr=log_file,
                                preexec_fn=_low_fd_limit)
    idle: list[socket.socket] = []
    try:
        url = f"http://127.0.0.1:{port}/healthz"
        assert _wait_http(url, 200, 30) == 200, log_path.read_text()
        for _ in range(FD_LIMIT * 2):  # the listen backlog holds what accept() cannot take
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=1))
            except OSError:  # the backlog is full too: enough
                break
        assert len(idle) > FD_LIMIT
        time.sleep(1.5)  # the accept loop runs into EMFILE meanwhile
        assert proc.poll() is None, log_path.read_text()[-3000:]
        for s in idle:
            s.close()
        idle.clear()
        assert _wait_http(url, 200, 20) == 200, log_path.read_text()[-3000:]
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log_path.read_text()[-3000:]
    finally:
        for s in idle:
            s.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    assert "Traceback" not in text, text[-3000:]
    reports = text.count("operator port: cannot accept connections")
    assert 1 <= reports <= 3, text[-3000:]  # rate-limited, not one per failed accept
