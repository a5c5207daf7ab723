"""Projection rows on the wire: rows/s and store commands per projection row, row by row (before,
``worker.projection_batching = false``) vs batched apply (after, P2).

    .venv/bin/python -m benchmarks.projections                 # the SecantusDB wire server
    MONGODB_URI=mongodb://... .venv/bin/python -m benchmarks.projections
    .venv/bin/python -m benchmarks.projections --rows 4000 --batch-size 20 --batch-size 100

Set-up (not measured): ``--tenants`` tenants x 200 cards, ``--rows`` card.updated events spread
round-robin over tenants and randomly over cards, no subscriptions; the tail materializes one
projection row per event for the measured projection. Measured: one worker ticking until
nothing is left to claim. Commands are counted with pymongo's command monitoring (every command
the worker's client sends: find, update, bulk writes as one ``update`` each, getMore...).
Writes ``benchmarks/results/projections.json``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.engine.tail.tail import Tail, TailSettings
from board_outbox.engine.work.worker import EffectWorker, WorkerSettings
from board_outbox.model.board import Card
from board_outbox.model.clock import SystemClock
from board_outbox.ports import Stores
from board_outbox.service.runtime import build_registry

from .common import CommandCounter, settle_heap, write_result


async def measure(uri: str, projection: str, rows: int, tenants: int, batch_size: int,
                  batching: bool, log: Any = print) -> dict[str, Any]:
    import uuid

    from pymongo import AsyncMongoClient

    from board_outbox.adapters.mongo import ensure_schema, mongo_stores

    counter = CommandCounter()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, tz_aware=True,
                                                               event_listeners=[counter])
    name = f"board_outbox_bench_{uuid.uuid4().hex[:8]}"
    db = client[name]
    try:
        await ensure_schema(db)
        stores = mongo_stores(db, MemoryLauncher())
        names = await _board(stores, db, rows, tenants)
        tail = Tail(events=stores.events, cursors=stores.cursors, outbox=stores.outbox,
                    subs=stores.subs, cards=stores.cards, clock=SystemClock(),
                    settings=TailSettings(batch_size=1000, seed="earliest"), projections=(projection,))
        await tail.drain_all(names)
        worker = EffectWorker(
            outbox=stores.outbox, registry=build_registry(stores, [projection]), clock=SystemClock(),
            rng=random.Random(1),
            settings=WorkerSettings(batch_size=batch_size, projection_batching=batching))
        settle_heap()
        counter.counts.clear()
        done = 0
        t0 = time.perf_counter()
        while True:
            res = await worker.tick_any()
            done += res.done
            if res.claimed == 0:
                break
        elapsed = time.perf_counter() - t0
        commands = dict(counter.counts)
        assert done == rows, (done, rows)
        model = await stores.readmodels.list(projection, names[0])
        assert model, "the read model is empty"
    finally:
        await client.drop_database(name)
        await client.close()
    total = sum(commands.values())
    r = {"projection": projection, "mode": "batched" if batching else "row by row",
         "batch_size": batch_size, "rows": rows, "tenants": tenants, "seconds": elapsed,
         "rows_per_s": rows / elapsed, "commands": total, "commands_per_row": total / rows,
         "commands_by_name": commands}
    log(f"projections {projection:13} {r['mode']:10} batch={batch_size:3}  "
        f"{r['rows_per_s']:8,.0f} rows/s  {r['commands_per_row']:5.2f} commands/row  {commands}")
    return r


async def _board(stores: Stores, db: Any, rows: int, tenants: int, cards: int = 200) -> list[str]:
    rng = random.Random(1)
    names = [f"t{i:03d}" for i in range(tenants)]
    from board_outbox.adapters.mongo.cards import CARDS, _card_id
    from board_outbox.model.codec import to_doc

    await db[CARDS].insert_many([  # the same documents MongoBoard.put writes, in one round trip
        {"_id": _card_id(t, f"c{c}"),
         **to_doc(Card(tenant_id=t, card_id=f"c{c}", title=f"card {c}", column=f"col{c % 5}"))}
        for t in names for c in range(cards)])
    seqs = dict.fromkeys(names, 0)
    docs = []
    now = time.time()
    for n in range(rows):
        t = names[n % tenants]
        seqs[t] += 1
        docs.append({"tenant_id": t, "seq": seqs[t], "type": "card.updated", "actor": f"u{n % 7}",
                     "card_id": f"c{rng.randrange(cards)}", "at": now})
    await db["board_events"].insert_many(docs, ordered=False)
    for t, seq in seqs.items():
        await db["board_event_counters"].update_one({"_id": t}, {"$max": {"seq": seq}}, upsert=True)
    return names


async def run(uri: str, rows: int, tenants: int, batch_sizes: list[int], projections: list[str],
              log: Any = print, on_result: Any = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for projection in projections:
        for b in batch_sizes:
            for batching in (False, True):
                out.append(await measure(uri, projection, rows, tenants, b, batching, log))
                if on_result is not None:
                    on_result(out)  # written as it goes: a cut-short run keeps what it measured
    return out


def main() -> int:
    import os

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--tenants", type=int, default=4)
    ap.add_argument("--batch-size", type=int, action="append", dest="batch_sizes")
    ap.add_argument("--projection", action="append", dest="projections")
    args = ap.parse_args()
    batch_sizes = args.batch_sizes or [20, 100]
    projections = args.projections or ["board-reflect", "card-activity"]
    uri = os.environ.get("MONGODB_URI")
    server: dict[str, str] = {"server": "MONGODB_URI"}
    setup = {"rows": args.rows, "tenants": args.tenants, "cards_per_tenant": 200,
             "load_average_at_start": os.getloadavg()[0]}

    def save(res: list[dict[str, Any]]) -> None:
        path = write_result("projections", {"server": server, "setup": setup, "results": res})
        print(f"wrote {path}", flush=True)

    if uri is None:
        from board_outbox.service.wireserver import WireServer

        with WireServer() as ws:
            server = ws.info()
            anyio.run(run, ws.uri, args.rows, args.tenants, batch_sizes, projections, print, save)
    else:
        anyio.run(run, uri, args.rows, args.tenants, batch_sizes, projections, print, save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
