"""N ``board-outbox run`` replicas against the MongoDB-wire server (S1-S3).

For 1, 2 and 4 replica processes: 20 tenants, one matching subscription each, the default
projection on, events trickled in round-robin. Reported per run:

- store requests per event: the server's own counter (``serverStatus`` ``network.numRequests``)
  over the trickle and the drain, minus this script's requests (emitter, progress polls and the
  counter reads, counted client-side by command monitoring);
- events/s (events over the time from the first insert to the last row done);
- insert -> done p50/p99 of the launch rows (event insert wall time -> row ``updated_at``);
- the replicas' CPU seconds (utime + stime from /proc) per 1,000 events;
- idle requests/s (no events) at 20 tenants, and at 2,000 tenants for one replica (with
  ``--statements``, the idle statements per second by command, collection and filter shape;
  ``--idle-only`` measures only these, ``--baseline SRC`` each also from another checkout,
  interleaved, and ``--idle-endpoints`` with the operator endpoints on, as in the runs);
- the requests per event by type (the server's ``opcounters``: query, insert, update, delete,
  getmore, command; ours subtracted where we send them);
- change events delivered per event: ``board_outbox_stream_events_total`` summed over the
  replicas' ``/metrics`` (each replica serves it on its own port), S5.

Run: ``.venv/bin/python -m benchmarks.replicas`` (about two minutes on two cores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from board_outbox.service.wireserver import WireServer

from .common import (
    RESULTS,
    CommandCount,
    cpu_seconds,
    percentiles,
    server_requests,
    stop,
    write_result,
)
from .replicas_report import plot

ROOT = Path(__file__).resolve().parent.parent


class Bench:
    def __init__(self, uri: str, db: str) -> None:
        self.counter = CommandCount()
        self.client: MongoClient[dict[str, Any]] = MongoClient(uri, event_listeners=[self.counter])
        self.db = self.client[db]
        self.db_name = db
        self.uri = uri

    def requests(self) -> int:
        """The server's request counter, minus our own requests so far (this read included)."""
        return server_requests(self.client, self.counter)

    def opcounters(self) -> dict[str, int]:
        """The server's opcounters by type, minus ours (our requests are commands and finds)."""
        ops = self.client.admin.command("serverStatus")["opcounters"]
        return {k: int(v) for k, v in ops.items() if isinstance(v, int)}

    def getmores(self) -> int:
        """The server's getMore counter (we send none). SecantusDB ends a change stream's
        awaitData wait at ANY oplog write, matching or not (secantus/commands.py ``_get_more``),
        so every write in the database costs every open stream one getMore; mongod waits for a
        matching event or maxAwaitTimeMS. Reported apart so the figures carry over."""
        return int(self.client.admin.command("serverStatus")["opcounters"]["getmore"])

    def seed(self, tenants: int, cards: int = 20, *, counters: bool = False) -> list[str]:
        names = [f"t{i:04d}" for i in range(tenants)]
        subs, docs = [], []
        for t in names:
            subs.append({"_id": f"{t}.s", "sub_id": f"{t}.s", "tenant_id": t, "bot": "bot",
                         "rule": {"event_types": ["card.created"]}})
            docs += [{"_id": f"{t}/c{c}", "tenant_id": t, "card_id": f"c{c}", "title": "x",
                      "column": "inbox"} for c in range(cards)]
        self.db["trigger_subscriptions"].insert_many(subs)
        if docs:
            self.db["board_cards"].insert_many(docs)
        if counters:  # tenants that already had one event, their cursors caught up
            self.db["board_event_counters"].insert_many([{"_id": t, "seq": 1} for t in names])
            self.db["trigger_cursors"].insert_many([{"_id": t, "seq": 1} for t in names])
        return names

    def emit(self, tenant: str, card: str) -> tuple[int, float]:
        seq = self.db["board_event_counters"].find_one_and_update(
            {"_id": tenant}, {"$inc": {"seq": 1}}, upsert=True, return_document=True)["seq"]
        at = time.time()
        self.db["board_events"].insert_one({"tenant_id": tenant, "seq": seq, "type": "card.created",
                                            "card_id": card, "at": at})
        return int(seq), at

    def done_rows(self) -> int:
        return self.db["trigger_effects"].count_documents({"state": "done"})


SRC = ROOT / "src"  # --src: run the replicas from another checkout's src/ (a baseline)
STEAL_AFTER: float | None = None  # --steal-after: [worker] steal_after_seconds
STATEMENTS = False  # --statements: log every command the replicas send (statement_log.py)


METRICS_PORT = 19464  # replica i serves /metrics on METRICS_PORT + i


def metrics_port(i: int) -> int:
    return METRICS_PORT + i


def stream_events(n: int) -> float:
    """``board_outbox_stream_events_total`` summed over replicas 0..n-1 (0 for one without)."""
    total = 0.0
    for i in range(n):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port(i)}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("board_outbox_stream_events_total"):
                total += float(line.split()[-1])
    return total


def spawn(uri: str, db: str, i: int, cfg_dir: Path, *, metrics: bool = True,
          src: Path | None = None) -> subprocess.Popen[bytes]:
    """Replica ``i``; ``metrics``: serve /metrics (which also turns on the per-tenant status
    refresh, several reads per tenant every ``metrics_interval_seconds``: off for idle runs);
    ``src``: run from this src/ (default ``SRC``)."""
    cfg = cfg_dir / f"r{i}.toml"
    cfg.write_text(
        f'[store]\nbackend = "mongo"\nuri = "{uri}"\ndatabase = "{db}"\n'
        f'[service]\nreplica_name = "r{i}"\nlog_level = "WARNING"\nmetrics_interval_seconds = 10\n'
        f'http_port = {metrics_port(i) if metrics else 0}\n'  # one /metrics port per replica
        '[tail]\nseed = "earliest"\n'
        '[launcher]\nkind = "log"\n'
        + (f'[worker]\nsteal_after_seconds = {STEAL_AFTER}\n' if STEAL_AFTER else '')
    )
    env = {**os.environ, "PYTHONPATH": str(src or SRC)}
    module = "board_outbox"
    if STATEMENTS:
        module, env["BENCH_STATEMENT_LOG"] = "benchmarks.statement_log", str(statement_log(cfg_dir, i))
    return subprocess.Popen([sys.executable, "-m", module, "run", "--config", str(cfg)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(cfg_dir / f"r{i}.log", "wb"))


def statement_log(cfg_dir: Path, i: int) -> Path:
    return cfg_dir / f"r{i}.statements"


def statements(cfg_dir: Path, n: int, start: float, end: float, events: int) -> dict[str, float]:
    """Statements per event by command, collection and filter shape, summed over replicas
    0..n-1, counted in the replicas' own logs between ``start`` and ``end`` (getMores apart)."""
    counts: dict[str, int] = {}
    for i in range(n):
        path = statement_log(cfg_dir, i)
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            at, name, coll, k, shape = (line.split("\t") + [""] * 5)[:5]
            if name == "getMore" or not start <= float(at) <= end:
                continue
            key = f"{name} {coll} {{{shape}}}".replace(" {}", "")
            counts[key] = counts.get(key, 0) + int(k)
    return {k: round(v / events, 2) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}


def wait_members(b: Bench, n: int, timeout: float = 60.0) -> None:
    if SRC != ROOT / "src":  # a baseline without membership: give it time to start
        time.sleep(8)
        return
    end = time.time() + timeout
    while time.time() < end:
        if b.db["board_outbox_members"].count_documents({"expires_at": {"$gt": time.time()}}) >= n:
            return
        time.sleep(0.5)
    raise RuntimeError(f"{n} replicas did not join within {timeout:.0f}s")


def idle_rate(b: Bench, seconds: float) -> tuple[float, float]:
    """(requests/s, of which change-stream getMores/s) with nothing to do."""
    time.sleep(3.0)  # start-up polls and the first heartbeats settle
    r0, g0, t0 = b.requests(), b.getmores(), time.time()
    time.sleep(seconds)
    dt = time.time() - t0
    return (b.requests() - r0) / dt, (b.getmores() - g0) / dt


def one_run(server: WireServer, n: int, *, events: int, rate: float, tenants: int,
            idle_seconds: float, tmp: Path) -> dict[str, Any]:
    db = f"bench_r{n}_{int(time.time())}"
    b = Bench(server.uri, db)
    names = b.seed(tenants)
    procs = [spawn(server.uri, db, i, tmp) for i in range(n)]
    try:
        wait_members(b, n)
        idle, idle_getmores = idle_rate(b, idle_seconds)
        cpu0 = sum(cpu_seconds(p.pid) for p in procs)
        s0, ops0 = stream_events(n), b.opcounters()
        r0, g0 = b.requests(), b.getmores()
        inserted: dict[tuple[str, int], float] = {}
        start = time.time()
        for k in range(events):
            target = start + k / rate
            if (pause := target - time.time()) > 0:
                time.sleep(pause)
            t = names[k % len(names)]
            seq, at = b.emit(t, f"c{k % 20}")
            inserted[(t, seq)] = at
        want = 2 * events  # a launch row and a projection row per event
        deadline = time.time() + 120
        while b.done_rows() < want and time.time() < deadline:
            time.sleep(0.2)
        finished = time.time()
        reqs = b.requests() - r0
        getmores = b.getmores() - g0
        ops1, s1 = b.opcounters(), stream_events(n)
        cpu = sum(cpu_seconds(p.pid) for p in procs) - cpu0
        lat, mat = [], []
        for d in b.db["trigger_effects"].find({"kind": "launch", "state": "done"},
                                              {"tenant_id": 1, "seq": 1, "updated_at": 1,
                                               "materialized_at": 1}):
            at = inserted.get((d["tenant_id"], d["seq"]))
            if at is not None:
                lat.append((float(d["updated_at"]) - at) * 1000)
                mat.append((float(d["materialized_at"]) - at) * 1000)
        done = b.done_rows()
        doubles = len(b.client[db]["trigger_effects"].distinct("row_key")) != \
            b.db["trigger_effects"].count_documents({})
    finally:
        stop(procs, 20)
        b.client.drop_database(db)
        b.client.close()
    return {
        "replicas": n, "tenants": tenants, "events": events, "rate_per_s": rate,
        "rows_done": done, "rows_expected": 2 * events, "duplicate_row_keys": doubles,
        "requests_per_event": round(reqs / events, 2),
        "getmores_per_event": round(getmores / events, 2),
        "requests_per_event_without_getmores": round((reqs - getmores) / events, 2),
        # by type, as the server counts them (our own progress reads are queries and commands)
        "opcounters_per_event": {k: round((ops1.get(k, 0) - v) / events, 2)
                                 for k, v in ops0.items()},
        "stream_events_per_event": round((s1 - s0) / events, 2),
        "events_per_s": round(events / (finished - start), 1),
        "insert_to_done_ms": {k: round(v, 1) for k, v in percentiles(lat).items()},
        "insert_to_materialized_ms": {k: round(v, 1) for k, v in percentiles(mat).items()},
        "cpu_s_per_1000_events": round(cpu * 1000 / events, 2),
        "idle_requests_per_s": round(idle, 1),
        "idle_getmores_per_s": round(idle_getmores, 1),
        **({"statements_per_event": statements(tmp, n, start, finished, events)}
           if STATEMENTS else {}),
    }


def idle_statements(cfg_dir: Path, start: float, end: float) -> dict[str, float]:
    """Statements per second by command, collection and filter shape (getMores included) in
    replica 0's log between ``start`` and ``end``."""
    counts: dict[str, int] = {}
    path = statement_log(cfg_dir, 0)
    if path.exists():
        for line in path.read_text().splitlines():
            at, name, coll, _k, shape = (line.split("\t") + [""] * 5)[:5]
            if start <= float(at) <= end:
                key = f"{name} {coll} {{{shape}}}".replace(" {}", "")
                counts[key] = counts.get(key, 0) + 1
    dt = max(1e-9, end - start)
    return {k: round(v / dt, 2) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}


def idle_many(server: WireServer, tenants: int, seconds: float, tmp: Path, *,
              src: Path | None = None, metrics: bool = False, settle: float = 3.0,
              label: str = "") -> dict[str, Any]:
    db = f"bench_idle_{tenants}_{int(time.time())}"
    b = Bench(server.uri, db)
    b.seed(tenants, cards=0, counters=True)
    log = statement_log(tmp, 0)
    if log.exists():
        log.unlink()
    procs = [spawn(server.uri, db, 0, tmp, metrics=metrics, src=src)]
    try:
        wait_members(b, 1)
        time.sleep(max(0.0, settle - 3.0))  # idle_rate settles 3 s itself
        t0 = time.time() + 3.0
        rate, getmores = idle_rate(b, seconds)
        t1 = time.time()
        cpu0 = cpu_seconds(procs[0].pid)
        time.sleep(2)
        cpu = (cpu_seconds(procs[0].pid) - cpu0) / 2
    finally:
        stop(procs, 20)
        b.client.drop_database(db)
        b.client.close()
    return {"tenants": tenants, "replicas": 1, "src": label or str(src or SRC),
            "endpoints": metrics, "settle_s": settle,
            "idle_requests_per_s": round(rate, 1),
            "idle_getmores_per_s": round(getmores, 1), "idle_cpu_fraction": round(cpu, 3),
            "load_average": round(os.getloadavg()[0], 2),
            **({"idle_statements_per_s": idle_statements(tmp, t0, t1)} if STATEMENTS else {})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", default="1,2,4")
    ap.add_argument("--events", type=int, default=300)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--tenants", type=int, default=20)
    ap.add_argument("--idle-seconds", type=float, default=6.0)
    ap.add_argument("--idle-tenants", default="20,2000")
    ap.add_argument("--idle-settle", type=float, default=3.0,
                    help="seconds after the replica joins before the idle window")
    ap.add_argument("--idle-only", action="store_true", help="only the idle measurements")
    ap.add_argument("--idle-endpoints", action="store_true",
                    help="idle with the operator endpoints on (the per-tenant status refresh)")
    ap.add_argument("--baseline", metavar="SRC",
                    help="also measure idle from this src/ (e.g. main's), interleaved")
    ap.add_argument("--src", help="run the replicas from this src/ (e.g. a baseline checkout)")
    ap.add_argument("--name", default="replicas", help="result file name")
    ap.add_argument("--steal-after", type=float, help="[worker] steal_after_seconds")
    ap.add_argument("--statements", action="store_true",
                    help="log the replicas' commands and report statements per event by command, "
                         "collection and filter shape (costs some replica CPU)")
    ap.add_argument("--plot-only", action="store_true",
                    help="re-draw results/NAME.png from results/NAME.json without running")
    args = ap.parse_args()
    global SRC, STEAL_AFTER, STATEMENTS
    STEAL_AFTER, STATEMENTS = args.steal_after, args.statements
    if args.plot_only:
        saved = json.loads((RESULTS / f"{args.name}.json").read_text())
        plot(saved["runs"], saved["idle"], RESULTS / f"{args.name}.png")
        return 0
    if args.src:
        SRC = Path(args.src).resolve()
    server = WireServer().start()
    runs: list[dict[str, Any]] = []
    idle: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for n in (int(x) for x in args.replicas.split(",") if x and not args.idle_only):
                r = one_run(server, n, events=args.events, rate=args.rate, tenants=args.tenants,
                            idle_seconds=args.idle_seconds, tmp=tmp)
                print(r, flush=True)
                runs.append(r)
            sources: list[tuple[Path | None, str]] = [(None, "this checkout")]
            if args.baseline:
                sources.append((Path(args.baseline).resolve(), "baseline"))
            for t in (int(x) for x in args.idle_tenants.split(",") if x):
                for src, label in sources:
                    i = idle_many(server, t, args.idle_seconds, tmp, src=src, label=label,
                                  metrics=args.idle_endpoints, settle=args.idle_settle)
                    print(i, flush=True)
                    idle.append(i)
    finally:
        server.close()
    write_result(args.name, {"runs": runs, "idle": idle,
                              "setup": {"server": "secantusd-py (WireServer)", **vars(args)}})
    plot(runs, idle, RESULTS / f"{args.name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
