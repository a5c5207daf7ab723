"""Real history loss and real server restarts (SPEC W3), each on a wire server of its own.

- A tiny oplog makes a stored resume token go stale for real: the server answers 286
  (ChangeStreamHistoryLost); the waker drops the token, polls, reopens, and loses nothing.
- A server restarted (same port, same storage) under a running ``board-outbox run`` process:
  the service rides it out, a later SIGTERM still exits 0, and every row is done exactly once.

These need a server the tests can start and restart themselves (SecantusDB's secantusd-py);
with only MONGODB_URI they skip, and say why.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient, MongoClient

from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.adapters.mongo import MongoChangeFeed, ensure_schema, mongo_stores
from board_outbox.model.board import Card
from board_outbox.model.errors import ChangeStreamLost
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.service.wireserver import WireServer, find_executable
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.live_mongo,
    pytest.mark.skipif(find_executable() is None,
                       reason="needs secantusd-py (the dev extra) to start and restart a server"),
]

T = "t1"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tiny_oplog() -> Iterator[WireServer]:
    with WireServer(oplog_max_entries=40) as server:
        yield server


@pytest.mark.anyio
async def test_stale_token_gets_a_real_286_then_poll_and_reopen_lose_nothing(
        tiny_oplog: WireServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="board_outbox")  # another test may have quietened it
    client: Any = AsyncMongoClient(tiny_oplog.uri, tz_aware=True)
    db = client["bo_history"]
    await ensure_schema(db)
    launcher = MemoryLauncher()
    stores = mongo_stores(db, launcher)
    await stores.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await stores.cards.put(Card(tenant_id=T, card_id="c"))
    feed = MongoChangeFeed(db, max_await_ms=200)

    async def emit() -> None:
        seq = await stores.events.allocate_seq(T)
        await stores.events.insert({"tenant_id": T, "seq": seq, "type": "x", "card_id": "c"})

    # A token taken from a live stream, persisted as the waker would ...
    token = None
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                nonlocal token
                async for ch in feed.watch(None):
                    if ch.tenant_id:
                        token = ch.token
                        tg.cancel_scope.cancel()

            tg.start_soon(watch)
            await anyio.sleep(0.5)
            await emit()
    assert token is not None
    assert stores.tokens is not None
    await stores.tokens.save(token)
    # ... then the oplog rolls past it (the cap is 40 entries; the server trims as it writes,
    # every 1,000 entries), while two more events land.
    await emit()
    await db["filler"].insert_many([{"i": i} for i in range(1100)], ordered=True)
    await emit()
    with pytest.raises(ChangeStreamLost, match=r"286|ChangeStreamHistoryLost"):
        async for _ in feed.watch(token):
            break

    cfg = load_config(env={}, tail={"poll_interval_seconds": 60, "seed": "earliest"},
                      worker={"idle_seconds": 0.05})
    service = Service(stores, cfg, rng=random.Random(1))
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            while len(launcher.launches) < 3:
                await anyio.sleep(0.05)
            assert service.stats.stream_reopens == 1  # the 286, seen by the waker
            await emit()  # the reopened stream wakes the tail for this one
            while len(launcher.launches) < 4:
                await anyio.sleep(0.05)
            service.stop()
    assert sorted(r.seq for r in launcher.launches) == [1, 2, 3, 4]
    assert service.stats.stream_wakes >= 1
    assert any("change stream lost" in r.getMessage() for r in caplog.records)
    assert await stores.tokens.load() != token  # the stale token is gone for good
    await client.close()


# --- a restart under a running `board-outbox run` -------------------------------------------


def _write_config(path: Path, uri: str) -> None:
    path.write_text(f"""
projections = ["board-reflect"]
[store]
backend = "mongo"
uri = "{uri}"
database = "bo_restart"
op_timeout_seconds = 2
connect_timeout_seconds = 1
server_selection_timeout_seconds = 2
[tail]
poll_interval_seconds = 0.5
seed = "earliest"
young_gap_seconds = 10
token_save_seconds = 0.5
[worker]
lease_seconds = 15
idle_seconds = 0.1
backoff_base_seconds = 0.2
backoff_cap_seconds = 1
[launcher]
kind = "log"
[service]
log_format = "json"
shutdown_grace_seconds = 5
""")


def test_server_restart_under_a_running_service_loses_nothing(tmp_path: Path) -> None:
    server = WireServer(storage=str(tmp_path / "data")).start()
    proc: subprocess.Popen[bytes] | None = None
    admin: MongoClient[dict[str, Any]] = MongoClient(server.uri, serverSelectionTimeoutMS=10000)
    try:
        db = admin["bo_restart"]

        async def board() -> None:
            client: Any = AsyncMongoClient(server.uri, tz_aware=True)
            stores = mongo_stores(client["bo_restart"], MemoryLauncher())
            await stores.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
            for i in range(20):
                await stores.cards.put(Card(tenant_id=T, card_id=f"c{i}"))
            await client.close()

        anyio.run(board)
        seq = 0

        def emit(n: int) -> None:
            nonlocal seq
            for _ in range(n):
                seq += 1
                db["board_event_counters"].update_one({"_id": T}, {"$max": {"seq": seq}},
                                                      upsert=True)
                db["board_events"].insert_one({"tenant_id": T, "seq": seq, "type": "card.created",
                                               "card_id": f"c{seq % 20}", "at": time.time()})

        def done() -> int:
            return db["trigger_effects"].count_documents({"state": "done", "kind": "launch"})

        cfg = tmp_path / "bo.toml"
        _write_config(cfg, server.uri)
        log = (tmp_path / "run.log").open("wb")
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        proc = subprocess.Popen([sys.executable, "-m", "board_outbox", "run", "--config",
                                 str(cfg)], stdout=log, stderr=subprocess.STDOUT, env=env)
        emit(5)
        wait_until(lambda: done() == 5, 60, "the first 5 launches")
        server.restart()  # SIGTERM, then the same port and storage
        assert proc.poll() is None, "the service died with the server"
        emit(5)
        wait_until(lambda: done() == 10, 90, "launches after the restart")
        # the projection rows of the same events settle on their own schedule
        wait_until(lambda: db["trigger_effects"].count_documents({"state": {"$ne": "done"}}) == 0, 60,
              "every row (projections too) done")
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        log.close()
        lines = [json.loads(x) for x in (tmp_path / "run.log").read_text().splitlines()
                 if x.startswith("{")]
        launched = [x["row_key"] for x in lines if x.get("logger") == "board_outbox.launcher"]
        assert sorted(set(launched)) == sorted(
            d["row_key"] for d in db["trigger_effects"].find({"kind": "launch"}))
        assert len(launched) == len(set(launched)) == 10  # nothing lost, nothing doubled
        assert db["trigger_effects"].count_documents({"state": {"$ne": "done"}}) == 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        admin.close()
        server.close()
