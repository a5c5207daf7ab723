"""F2 on the wire: a limit holds across replicas. Four workers, each with its own client (as four
``run`` processes would be), share one database with ``bot_in_flight = 2``; the launcher, the bot
runner's stand-in, records how many launches of each bot run at once. Two services launching
through a trickling HTTP runner keep to ``bot_in_flight = 1`` however long each launch runs, and
a running service re-creates the limits' indexes when their collection is dropped (issue 30)."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient

from benchmarks.common import CountingRunner, one_bot_backlog
from board_outbox.adapters.launchers import HttpLauncher
from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.adapters.mongo import mongo_stores
from board_outbox.adapters.mongo.limits import LIMITS
from board_outbox.engine.flow.limits import LimitSettings
from board_outbox.engine.tail.tail import Tail, TailSettings
from board_outbox.engine.work.outcomes import TickResult
from board_outbox.engine.work.worker import EffectWorker, WorkerSettings
from board_outbox.model.clock import SystemClock
from board_outbox.model.rows import DONE
from board_outbox.ports import RowFilter
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service, build_registry

pytestmark = [pytest.mark.live_mongo, pytest.mark.anyio]

T = "t1"
ROWS = 24
WORKERS = 4


async def test_two_in_flight_per_bot_across_four_replicas(live_uri: str, live_db: Any) -> None:
    runner = CountingRunner(0.05)
    clock = SystemClock()
    clients: list[Any] = [AsyncMongoClient(live_uri, tz_aware=True) for _ in range(WORKERS)]
    try:
        replicas = [mongo_stores(c[live_db.name], runner, change_feed=False) for c in clients]
        first = replicas[0]
        await one_bot_backlog(first, T, "b", ROWS, clock.now())
        tail = Tail(events=first.events, cursors=first.cursors, outbox=first.outbox,
                    subs=first.subs, cards=first.cards, clock=clock,
                    settings=TailSettings(seed="earliest"), projections=())
        await tail.drain_tenant(T)

        limits = LimitSettings(bot_in_flight=2, wait_seconds=0.02)
        workers = [EffectWorker(outbox=s.outbox, registry=build_registry(s, [], limits=limits),
                                clock=clock, settings=WorkerSettings(batch_size=2),
                                rng=random.Random(i))
                   for i, s in enumerate(replicas)]
        total = TickResult()

        async def work(w: EffectWorker) -> None:
            while sum(runner.launched.values()) < ROWS:
                res = await w.tick_any()
                total.add(res)
                if res.claimed == 0 or res.deferred == res.claimed:
                    await anyio.sleep(0.01)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for w in workers:
                    tg.start_soon(work, w)
        rows = await first.outbox.find(RowFilter(tenant_id=T, limit=1000))
    finally:
        for c in clients:
            await c.close()

    assert runner.most["b"] == 2  # never more than the limit, and the limit was reached
    assert total.deferred > 0  # the limit really held rows back
    assert len(rows) == ROWS and all(r.state == DONE for r in rows)
    assert all(r.attempts == 0 and r.errors == [] for r in rows)  # waiting spent nothing
    assert total.failed == total.retried == 0
    assert sorted(runner.launched.values()) == [1] * ROWS  # each launched once


# --- issue 30: a slot lives as long as its launch ---------------------------------------------

SLOT = 2.0  # limits.slot_seconds
TRICKLE = (10, 0.4)  # a launch's answer: 10 bytes, one every 0.4 s (4 s: twice the slot)


class TricklingRunner:
    """A bot runner over HTTP that answers slowly but steadily: each launch's body goes out one
    byte every ``TRICKLE[1]`` seconds, so the launcher's read timeout (per read) never fires
    while the launch outlasts ``slot_seconds``. It counts, on its side, the launches of each
    bot in flight at once (from the request until its last byte is sent or its client left)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.launched: Counter[str] = Counter()  # row key -> launches begun
        self.seconds: list[float] = []  # each answered launch's duration
        self.cut = 0  # launches whose client left before the answer ended
        runner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                bot = req["bot"]
                began = time.monotonic()
                with runner.lock:
                    runner.now[bot] += 1
                    runner.most[bot] = max(runner.most[bot], runner.now[bot])
                    runner.launched[req["row_key"]] += 1
                try:
                    n, every = TRICKLE
                    body = json.dumps({"launch_id": req["row_key"]}).encode().rjust(n)
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.flush()
                    for i in range(len(body)):
                        time.sleep(every if i < n else 0)
                        self.wfile.write(body[i:i + 1])
                        self.wfile.flush()
                    runner.seconds.append(time.monotonic() - began)
                except OSError:  # the launcher hung up: this launch is over
                    with runner.lock:
                        runner.cut += 1
                    self.close_connection = True
                finally:
                    with runner.lock:
                        runner.now[bot] -= 1

            def log_message(self, *a: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/launch"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _replica_config(**limits: Any) -> Any:
    # a heartbeat every 3 x 0.2 = 0.6 s renews a running launch's slot (2 s: >= 3 beats)
    return load_config(
        env={}, projections=[],
        tail={"poll_interval_seconds": 0.2, "seed": "earliest", "change_streams": False},
        worker={"lease_seconds": 3, "heartbeat_fraction": 0.2, "batch_size": 1,
                "idle_seconds": 0.05, "backoff_base_seconds": 0.1, "backoff_cap_seconds": 0.5},
        limits={"slot_seconds": SLOT, "wait_seconds": 0.1, **limits},
        service={"shutdown_grace_seconds": 2})


async def test_a_trickling_runner_never_sees_two_launches_of_a_bot_at_bot_in_flight_1(
        live_uri: str, live_db: Any) -> None:
    """Issue 30: ``bot_in_flight = 1``, two replicas, a runner that sends one byte every 0.4 s
    (each launch lasts twice ``slot_seconds``, the launcher's 1 s read timeout never fires).
    Before, the slot was leased once for ``slot_seconds``: the other replica took it while the
    first launch ran, and the runner saw two launches of the bot at once. Now the lease
    heartbeat renews the slot while its launch runs: never more than one."""
    rows = 3
    runner = TricklingRunner()
    clock = SystemClock()
    clients: list[Any] = [AsyncMongoClient(live_uri, tz_aware=True) for _ in range(2)]
    launchers = [HttpLauncher(runner.url, timeout_seconds=1.0) for _ in clients]
    try:
        replicas = [mongo_stores(c[live_db.name], la, change_feed=False)
                    for c, la in zip(clients, launchers, strict=True)]
        first = replicas[0]
        await one_bot_backlog(first, T, "b", rows, clock.now())
        # the rows exist before the replicas start, unclaimed: both replicas' workers claim them
        tail = Tail(events=first.events, cursors=first.cursors, outbox=first.outbox,
                    subs=first.subs, cards=first.cards, clock=clock,
                    settings=TailSettings(seed="earliest"), projections=())
        await tail.drain_tenant(T)
        cfg = _replica_config(bot_in_flight=1)
        services = [Service(s, cfg, rng=random.Random(i)) for i, s in enumerate(replicas)]
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for service in services:
                    tg.start_soon(service.run)
                while len(runner.seconds) < rows:
                    await anyio.sleep(0.1)
                for service in services:
                    service.stop()
        done = await first.outbox.find(RowFilter(tenant_id=T, limit=100))
    finally:
        runner.close()
        for la in launchers:
            await la.aclose()
        for c in clients:
            await c.close()

    assert runner.most["b"] == 1, f"{runner.most['b']} launches of one bot in flight at once"
    assert all(s > 1.5 * SLOT for s in runner.seconds)  # each launch outlasted its slot...
    assert runner.cut == 0  # ... and ran to its end, never cut
    assert sorted(runner.launched.values()) == [1] * rows  # each row launched once
    assert all(r.state == DONE and r.attempts == 0 for r in done)
    assert sum(s.stats.worker.deferred for s in services) > 0  # the other replica did wait


async def test_the_limits_indexes_come_back_after_their_collection_is_dropped(
        live_uri: str, live_db: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 30: the limits collection dropped under a running service (its TTL index with
    it: slots and counters would pile up until a restart). The service's periodic check
    re-creates its indexes, off every launch's path."""
    caplog.set_level(logging.WARNING, logger="board_outbox")
    client: Any = AsyncMongoClient(live_uri, tz_aware=True)
    db = client[live_db.name]
    coll = db[LIMITS]
    wanted = {"key_holder", "expire_ttl"}
    try:
        cfg = _replica_config(bot_in_flight=1, index_check_seconds=0.2)
        service = Service(mongo_stores(db, MemoryLauncher(), change_feed=False), cfg)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(service.run)
                assert wanted <= set(await coll.index_information())
                while not service.loops.get("limits"):
                    await anyio.sleep(0.05)
                await coll.insert_one({"_id": "x", "n": 1})  # the collection as it was in use
                await coll.drop()
                while not wanted <= set(await coll.index_information()):
                    await anyio.sleep(0.05)
                service.stop()
        info = await coll.index_information()
    finally:
        await client.close()
    assert info["expire_ttl"].get("expireAfterSeconds") == 0  # the TTL index, as created
    assert any("re-created" in r.getMessage() and "expire_ttl" in r.getMessage()
               for r in caplog.records)
