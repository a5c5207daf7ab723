"""Command counts per event for one in-process replica on a wire server: where the store work
goes (results/wire-commands-before-after.txt holds a before/after).

    MONGODB_URI='mongodb://127.0.0.1:PORT/?replicaSet=secantus' python benchmarks/wire_profile.py 500 5
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from pymongo import AsyncMongoClient, monitoring

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from board_outbox.adapters.mongo import ensure_schema, mongo_stores
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from tests.harness.replica import RecordingLauncher
from tests.harness.storeserver import setup_board


class ByCollection(monitoring.CommandListener):
    def __init__(self) -> None:
        self.n: Counter[tuple[str, str]] = Counter()
        self.us: Counter[tuple[str, str]] = Counter()
        self._open: dict[int, tuple[str, str]] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        target = event.command.get(event.command_name)
        self._open[event.request_id] = (event.command_name, target if isinstance(target, str) else "")

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._done(event.request_id, event.duration_micros)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._done(event.request_id, event.duration_micros)

    def _done(self, rid: int, us: int) -> None:
        key = self._open.pop(rid, ("?", ""))
        self.n[key] += 1
        self.us[key] += us


async def main(events: int, tenants: int) -> None:
    listener = ByCollection()
    client: Any = AsyncMongoClient(os.environ["MONGODB_URI"], tz_aware=True,
                                   event_listeners=[listener])
    db = client[f"wire_profile_{os.getpid()}"]
    await ensure_schema(db)
    stores = mongo_stores(db, RecordingLauncher(db))
    names = await setup_board(stores, tenants, 60)
    cfg = load_config(env={}, projections=[],
                      tail={"poll_interval_seconds": 0.5, "seed": "earliest", "batch_size": 500},
                      worker={"lease_seconds": 3, "idle_seconds": 0.05, "batch_size": 50,
                              "backoff_base_seconds": 0.1, "backoff_cap_seconds": 1},
                      service={"replica_name": "p", "shutdown_grace_seconds": 2})
    service = Service(stores, cfg)
    rng = random.Random(5)
    listener.n.clear()
    t0 = time.monotonic()
    seqs: dict[str, int] = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await anyio.sleep(0.5)
        for _ in range(events // 100):
            docs = []
            for _ in range(100):
                t = rng.choice(names)
                seqs[t] = seqs.get(t, 0) + 1
                docs.append({"tenant_id": t, "seq": seqs[t], "type": rng.choice(
                    ("card.created", "card.moved", "card.updated")),
                    "card_id": f"c{rng.randrange(60)}", "at": time.time()})
            for t, s in seqs.items():
                await db["board_event_counters"].update_one({"_id": t}, {"$max": {"seq": s}},
                                                            upsert=True)
            await db["board_events"].insert_many(docs)
        while time.monotonic() - t0 < float(os.environ.get("TMAX", "300")):
            st = await stores.outbox.count_by_state()
            cur = {d["_id"]: d.get("seq") async for d in db["trigger_cursors"].find({})}
            if st.get("pending", 0) + st.get("claimed", 0) == 0 and all(
                    cur.get(t) == s for t, s in seqs.items()):
                break
            await anyio.sleep(0.5)
        elapsed = time.monotonic() - t0
        service.stop()
    rows = await db["trigger_effects"].count_documents({})
    print(f"events={events} rows={rows} elapsed={elapsed:.1f}s")
    for key, n in listener.n.most_common():
        print(f"{' '.join(key):32} n={n:5d} per_ev={n / events:.2f} "
              f"ms_avg={listener.us[key] / n / 1000:7.2f}")
    total = sum(listener.n.values())
    print(f"total {total} commands = {total / events:.2f} per event")
    await client.drop_database(db.name)
    await client.close()


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]), int(sys.argv[2]))
