"""The rolling series behind the console's charts, measured on the wire.

1. **A real run**: two ``board-outbox run`` replicas (subprocesses) over one MongoDB-wire
   server, ``--tenants`` tenants, events emitted at ``--rate`` a second for ``--minutes``
   minutes, a bot runner that refuses (400: parked at once) the cards named ``bad`` (1 in
   ``--bad-every`` events); then both replicas stop (each flushes once on the way out). What
   ``trigger_series`` holds is compared with the store itself: its documents per replica and
   minute, their size, and the merged per-minute counts against the rows done and failed and
   the events materialized.
2. **Read costs**: ``--hours`` hours of documents for ``--replicas`` replicas, each listing
   ``--lag-tenants`` tenants' lag, planted; then the console's reads are timed: the charts page
   (the tenants most behind, then the window with their lag only), the overview's sparklines (a
   page of 100 tenants, the last hour) and, for comparison, the whole window unfiltered.

Run (``MONGODB_URI`` for a real replica set, else ``secantusd-py`` as a child process)::

    .venv/bin/python -m benchmarks.series [--minutes 3] [--rate 20] [--hours 6]

Result: ``results/series.json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import bson
from pymongo import AsyncMongoClient, MongoClient

from board_outbox.adapters.mongo import ensure_schema
from board_outbox.adapters.mongo.series import SERIES, MongoSeriesStore
from board_outbox.engine.upkeep.series import most_behind, read_window
from board_outbox.model.series import MINUTE, minute_of, series_id
from board_outbox.service.wireserver import WireServer

from .common import mongo_uri, percentiles, write_result


class Runner:
    """The bot runner the ``http`` launcher posts to: 400 (permanent: parked at once) for a card
    named ``bad``, 200 otherwise."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                bad = b'"card_id": "bad"' in body or b'"card_id":"bad"' in body
                out = b"no" if bad else b'{"launch_id": "L"}'
                self.send_response(400 if bad else 200)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *_a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/launch"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def real_run(uri: str, tenants: int, rate: float, minutes: float, bad_every: int) -> dict[str, Any]:
    name = f"bo_series_{uuid.uuid4().hex[:8]}"
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    db = client[name]
    ids = [f"t{i:02d}" for i in range(tenants)]
    for t in ids:
        db["trigger_subscriptions"].insert_one({"_id": f"{t}.s", "sub_id": f"{t}.s",
                                                "tenant_id": t, "bot": "bot",
                                                "rule": {"event_types": ["card.created"]}})
        for card in ("c", "bad"):
            db["board_cards"].insert_one({"_id": f"{t}/{card}", "tenant_id": t,
                                          "card_id": card, "title": card, "column": "inbox"})
    runner = Runner()
    tmp = Path(tempfile.mkdtemp(prefix="bo-series-"))
    procs = []
    for replica in ("replica-a", "replica-b"):
        cfg = tmp / f"{replica}.toml"
        cfg.write_text(
            f'[store]\nbackend = "mongo"\nuri = "{uri}"\ndatabase = "{name}"\n'
            f'[tail]\nseed = "earliest"\n[service]\nreplica_name = "{replica}"\n'
            f'[launcher]\nkind = "http"\nurl = "{runner.url}"\n')
        env = {**os.environ, "BOARD_OUTBOX_SERVICE__HTTP_PORT": "0"}
        with open(tmp / f"{replica}.log", "wb") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "board_outbox", "run", "--config", str(cfg)], env=env,
                stdout=subprocess.DEVNULL, stderr=log))
    started = time.time()
    emitted = bad = 0
    try:
        end = started + minutes * 60
        while time.time() < end:
            t = ids[emitted % tenants]
            card = "bad" if emitted % bad_every == bad_every - 1 else "c"
            bad += card == "bad"
            seq = int(db["board_event_counters"].find_one_and_update(
                {"_id": t}, {"$inc": {"seq": 1}}, upsert=True, return_document=True)["seq"])
            db["board_events"].insert_one({"tenant_id": t, "seq": seq, "type": "card.created",
                                           "card_id": card, "at": time.time()})
            emitted += 1
            time.sleep(max(0.0, started + emitted / rate - time.time()))
        deadline = time.time() + 60
        while time.time() < deadline and db["trigger_effects"].count_documents(
                {"state": {"$in": ["pending", "claimed"]}}) > 0:
            time.sleep(0.5)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)
        runner.close()
    stopped = time.time()
    docs = list(db[SERIES].find().sort("minute", 1))
    sizes = [len(bson.encode(d)) for d in docs]
    per_replica: dict[str, list[int]] = {}
    for d in docs:
        per_replica.setdefault(d["replica"].split(":")[0], []).append(d["minute"])

    async def merged() -> dict[str, Any]:
        aclient: Any = AsyncMongoClient(uri, tz_aware=True)
        try:
            store = MongoSeriesStore(aclient[name])
            span = int((stopped - started) // MINUTE) + 3
            w = await read_window(store, stopped + MINUTE, span)
            return {"minutes": [{"minute": m, "materialized": f.counts.materialized,
                                 "done": f.counts.done, "dead": f.counts.dead,
                                 "replicas": f.replicas} for m, f in w.figures.items()],
                    "materialized": sum(w.counts("materialized")),
                    "done": sum(w.counts("done")), "dead": sum(w.counts("dead"))}
        finally:
            await aclient.close()

    series = anyio.run(merged)
    store_figures = {
        "events": db["board_events"].count_documents({}),
        "done": db["trigger_effects"].count_documents({"state": "done"}),
        "failed": db["trigger_effects"].count_documents({"state": "failed"}),
    }
    client.drop_database(name)
    client.close()
    return {"tenants": tenants, "rate": rate, "minutes": round((stopped - started) / 60, 2),
            "emitted": emitted, "refused_cards": bad, "documents": len(docs),
            "documents_per_replica": {r: len(ms) for r, ms in per_replica.items()},
            "distinct_minutes_per_replica": {r: len(set(ms)) for r, ms in per_replica.items()},
            "document_bytes": {"min": min(sizes, default=0), "max": max(sizes, default=0)},
            "series": series, "store": store_figures}


async def read_costs(uri: str, hours: float, replicas: int, lag_tenants: int,
                     loads: int) -> dict[str, Any]:
    name = f"bo_series_read_{uuid.uuid4().hex[:8]}"
    client: Any = AsyncMongoClient(uri, tz_aware=True)
    db = client[name]
    try:
        await ensure_schema(db)
        now = time.time()
        last = minute_of(now) - MINUTE
        minutes = int(hours * 60)
        docs = []
        for r in range(replicas):
            for i in range(minutes):
                m = last - i * MINUTE
                lag = [{"t": f"tenant-{r}-{k:05d}", "n": lag_tenants - k + i % 7}
                       for k in range(lag_tenants)]
                docs.append({"_id": series_id(m, f"r{r}"), "minute": m, "replica": f"r{r}",
                             "counts": {"materialized": 1000 * (minutes - i), "done": 990 * (
                                 minutes - i), "dead": minutes - i},
                             "base": {"materialized": 1000 * (minutes - i - 1),
                                      "done": 990 * (minutes - i - 1), "dead": minutes - i - 1},
                             "lag_total": sum(e["n"] for e in lag), "behind": lag_tenants,
                             "listed": lag_tenants, "lag": lag})
        for start in range(0, len(docs), 200):
            await db[SERIES].insert_many(docs[start:start + 200])
        size = len(bson.encode(docs[0]))
        store = MongoSeriesStore(db)
        page_tenants = [f"tenant-0-{k:05d}" for k in range(100)]

        async def timed(fn: Any) -> list[float]:
            out = []
            for _ in range(loads):
                t0 = time.perf_counter()
                await fn()
                out.append(time.perf_counter() - t0)
            return out

        async def charts_page() -> None:  # the page's default window: 1 h
            top = await most_behind(store, now, 8)
            await read_window(store, now, 60, top)

        async def charts_page_6h() -> None:
            top = await most_behind(store, now, 8)
            await read_window(store, now, int(min(hours, 6) * 60), top)

        async def sparklines() -> None:
            await read_window(store, now, 60, page_tenants)

        async def unfiltered() -> None:
            await read_window(store, now, minutes, None)

        return {"hours": hours, "replicas": replicas, "lag_tenants": lag_tenants,
                "documents": len(docs), "document_bytes": size,
                "charts_page_1h_s": percentiles(await timed(charts_page)),
                "charts_page_6h_s": percentiles(await timed(charts_page_6h)),
                "sparklines_100_tenants_1h_s": percentiles(await timed(sparklines)),
                "whole_window_unfiltered_s": percentiles(await timed(unfiltered))}
    finally:
        await client.drop_database(name)
        await client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tenants", type=int, default=12)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--bad-every", type=int, default=40)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--lag-tenants", type=int, default=1000)
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--skip-run", action="store_true", help="only the read costs")
    args = ap.parse_args()
    server = None
    uri = mongo_uri()
    if uri is None:
        server = WireServer().start()
        uri = server.uri
    try:
        result: dict[str, Any] = {}
        if not args.skip_run:
            result["run"] = real_run(uri, args.tenants, args.rate, args.minutes, args.bad_every)
            print(result["run"])
        result["reads"] = anyio.run(read_costs, uri, args.hours, args.replicas,
                                    args.lag_tenants, args.loads)
        print(result["reads"])
        write_result("series", result)
    finally:
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()
