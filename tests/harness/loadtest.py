"""Load test on loopback (SPEC B2): N events across T tenants, 4 replica processes sharing one
store -- the store server holding the memory backend, or a real replica set (--mongo-uri or
MONGODB_URI) -- one replica SIGKILLed mid-run and restarted. Reports rows, losses, duplicates,
time to drain.

    python -m tests.harness.loadtest --events 100000 --tenants 50
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from tests.harness.storeserver import Connection

ROOT = Path(__file__).resolve().parents[2]


def _spawn(module: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class MongoAdmin:
    """The driver's side on a real replica set: the same four calls as the store server's Admin."""

    def __init__(self, uri: str, db_name: str) -> None:
        from pymongo import AsyncMongoClient

        from board_outbox.adapters.memory import MemoryLauncher
        from board_outbox.adapters.mongo import mongo_stores

        self.client: Any = AsyncMongoClient(uri, tz_aware=True)
        self.db = self.client[db_name]
        self.stores = mongo_stores(self.db, MemoryLauncher(), change_feed=False)
        self.seqs: dict[str, int] = {}

    async def setup(self, tenants: int, cards: int) -> list[str]:
        from board_outbox.adapters.mongo import ensure_schema
        from tests.harness.storeserver import setup_board

        await ensure_schema(self.db)
        return await setup_board(self.stores, tenants, cards)

    async def emit(self, docs: list[tuple[str, str, str, float]]) -> int:
        rows = []
        for tenant, etype, card_id, at in docs:
            self.seqs[tenant] = self.seqs.get(tenant, 0) + 1
            rows.append({"tenant_id": tenant, "seq": self.seqs[tenant], "type": etype,
                         "card_id": card_id, "at": at})
        for t, seq in self.seqs.items():  # allocate first, then insert: as emit does
            await self.db["board_event_counters"].update_one({"_id": t}, {"$max": {"seq": seq}},
                                                              upsert=True)
        await self.db["board_events"].insert_many(rows, ordered=False)
        return len(rows)

    async def status(self) -> dict[str, Any]:
        behind = 0
        for t, seq in self.seqs.items():
            behind += seq - (await self.stores.cursors.get(t) or 0)
        return {"rows": await self.stores.outbox.count_by_state(), "behind": behind,
                "launches": await self.db["loadtest_launches"].count_documents({})}

    async def audit(self) -> dict[str, Any]:
        from tests.harness.audit import audit

        docs = await self.db["trigger_effects"].find({}).to_list(None)
        launched = [d["row_key"] async for d in self.db["loadtest_launches"].find({})]
        try:
            return await audit(self.stores, list(self.seqs), docs, launched)
        finally:
            await self.client.drop_database(self.db.name)
            await self.client.close()


async def drive(port: int, events: int, tenants: int, replicas: list[Any], spawn_replica: Any,
                log: Any, mongo: tuple[str, str] | None = None) -> dict[str, Any]:
    admin: Any = MongoAdmin(*mongo) if mongo else Connection("127.0.0.1", port).admin()
    names = await admin.setup(tenants, 60)
    rng = random.Random(5)
    t0 = time.monotonic()
    kill_at = events // 2
    killed = restarted = False
    sent = 0
    chunk = min(2000, max(50, events // 10))
    while sent < events:
        n = min(chunk, events - sent)
        docs = [(rng.choice(names), rng.choice(("card.created", "card.moved", "card.updated")),
                 f"c{rng.randrange(60)}", time.time()) for _ in range(n)]
        await admin.emit(docs)
        sent += n
        if not killed and sent >= kill_at:
            await anyio.sleep(0.3)  # let the victim hold claims
            victim = replicas[0]
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            killed = True
            log(f"  SIGKILLed replica 0 (pid {victim.pid}) after {sent} events")
        await anyio.sleep(0.02)
        if killed and not restarted and sent >= kill_at + 3 * chunk:
            replicas[0] = spawn_replica(0)
            restarted = True
            log("  restarted replica 0")
    if not restarted:
        replicas[0] = spawn_replica(0)
    emitted = time.monotonic() - t0
    log(f"  emitted {events} events in {emitted:.1f}s; draining ...")
    last = None
    while True:
        st = await admin.status()
        live = st["rows"].get("pending", 0) + st["rows"].get("claimed", 0)
        if st["behind"] == 0 and live == 0:
            break
        if st != last:
            log(f"  behind {st['behind']:6d} events | rows {st['rows']} | launches {st['launches']}")
            last = st
        await anyio.sleep(1.0)
        if time.monotonic() - t0 > 900:
            raise TimeoutError(f"did not drain: {st}")
    drained = time.monotonic() - t0
    audit = await admin.audit()
    return {**audit, "tenants": tenants, "replicas": len(replicas), "killed": 1,
            "seconds_to_emit": round(emitted, 1), "seconds_to_drain": round(drained, 1)}


def run(events: int, tenants: int, n_replicas: int = 4, log: Any = print,
        mongo_uri: str | None = None) -> dict[str, Any]:
    """Over the store server (memory backend), or over a real replica set with ``mongo_uri``."""
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        server = None if mongo_uri else _spawn("tests.harness.storeserver", "--port-file",
                                               str(port_file))
        replicas: list[subprocess.Popen[bytes]] = []
        db_name = f"board_outbox_load_{os.getpid()}"
        try:
            port = 0
            if server is not None:
                deadline = time.monotonic() + 20
                while not port_file.exists() or not port_file.read_text():
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise RuntimeError("store server did not start")
                    time.sleep(0.05)
                port = int(port_file.read_text())

            def spawn_replica(i: int) -> subprocess.Popen[bytes]:
                if mongo_uri:
                    return _spawn("tests.harness.replica", "--mongo-uri", mongo_uri, "--db",
                                  db_name, "--name", f"r{i}")
                return _spawn("tests.harness.replica", "--port", str(port), "--name", f"r{i}")

            replicas = [spawn_replica(i) for i in range(n_replicas)]
            mongo = (mongo_uri, db_name) if mongo_uri else None
            result = anyio.run(drive, port, events, tenants, replicas, spawn_replica, log, mongo)
            result["store"] = "mongo replica set" if mongo_uri else "store server (memory backend)"
        finally:
            for p in replicas:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in replicas:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
            if server is not None:
                server.terminate()
                server.wait(timeout=10)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--tenants", type=int, default=50)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument("--mongo-uri", default=os.environ.get("MONGODB_URI"),
                    help="run against this replica set (default: $MONGODB_URI; else the store server)")
    args = ap.parse_args()
    where = "a real replica set" if args.mongo_uri else "the store server (memory backend)"
    print(f"load test: {args.events} events, {args.tenants} tenants, {args.replicas} replica "
          f"processes over {where}")
    res = run(args.events, args.tenants, args.replicas, mongo_uri=args.mongo_uri)
    print(json.dumps(res, indent=2))
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0 if res["lost_rows"] == 0 and res["duplicate_rows"] == 0 and res["not_done"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
