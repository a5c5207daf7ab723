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
