"""Throughput at the store's floor (T1, S6): a saturated backlog drained by
``board-outbox run`` replicas (1, 2, 4, 8) beside the bare-driver floor (``floor.py``), in one run,
on one server.

For each backlog (default 2,000 and 20,000 events; 10 tenants, one subscription each that every
event matches, plus the default projection ``board-reflect``: two rows per event, launches over
HTTP to a local bot runner), every pipeline gets a fresh database with the same events already
in the log, then runs until every row is done. Measured for each:

- events/s: events over the time from the start to the last row done;
- the server's CPU per event (utime + stime of the server process, from /proc);
- the pipeline's own CPU per event: the whole process(es) -- every ``board-outbox run``, or the
  floor's process -- with each one's idle rate (measured right after, nothing to do) subtracted;
- store requests per event: the server's ``network.numRequests``, minus this script's own and
  minus the getMores, which are reported apart (``opcounters.getmore``: a change stream's wakes,
  and the later batches of a large find);
- the longest stretch without progress: the longest time between two consecutive done marks
  (from the start to the first one included), read from the done rows' ``updated_at`` after the
  run, so this script's polling costs nothing for it;
- from the replicas' logs: store timeouts that aborted a batch, "done but not recorded", and
  tenants reported stalled (each must be 0);
- with ``--statements``, one more run per pipeline with every command logged by the client
  (``statement_log.py``): statements per event by command, collection and filter shape, and
  their round-trip milliseconds per event (the server is single-threaded here: its time).

``--baseline SRC`` also runs each replica count from another checkout's ``src/`` (e.g. main),
interleaved with this one's, so that before and after are measured in the same run (``--src``
replaces this checkout's instead). Only ratios within one run count: the load average of the
machine is recorded beside each pipeline.

Run: ``.venv/bin/python -m benchmarks.throughput`` (``--backlogs 2000 --replicas 1`` for a quick
look). Writes ``results/throughput.json`` and ``throughput.png``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from board_outbox.adapters.mongo.outbox.statements import IN_STATE
from board_outbox.service.wireserver import WireServer

from .common import (
    RESULTS,
    CommandCount,
    bot_runner,
    cpu_seconds,
    server_requests,
    stop,
    write_result,
)
from .throughput_report import plot, table

ROOT = Path(__file__).resolve().parent.parent
TENANTS = 10
CARDS = 20
# what a replica's log says when it aborted a batch on a store timeout, gave up a done mark, or
# found a tenant stalled (none of them may happen under mere overload)
SYMPTOMS = {"aborted": "batch aborted, cursor untouched", "unrecorded": "done but not recorded",
            "stalled": "stalled"}


class Store:
    """This script's own client (its commands counted, to be subtracted from the server's)."""

    def __init__(self, uri: str) -> None:
        self.counter = CommandCount()
        self.client: MongoClient[dict[str, Any]] = MongoClient(uri, event_listeners=[self.counter])

    def requests(self) -> int:
        return server_requests(self.client, self.counter)

    def getmores(self) -> int:
        """The server's getMore counter (this script sends none)."""
        return int(self.client.admin.command("serverStatus")["opcounters"]["getmore"])

    def seed(self, db_name: str, events: int) -> None:
        db = self.client[db_name]
        tenants = [f"t{i:02d}" for i in range(TENANTS)]
        db["trigger_subscriptions"].insert_many([
            {"_id": f"{t}.s", "sub_id": f"{t}.s", "tenant_id": t, "bot": "bot", "rule": {}}
            for t in tenants])
        db["board_cards"].insert_many([
            {"_id": f"{t}/c{c}", "tenant_id": t, "card_id": f"c{c}", "title": f"card {c}",
             "column": "inbox"} for t in tenants for c in range(CARDS)])
        now = time.time()
        docs, seqs = [], dict.fromkeys(tenants, 0)
        for k in range(events):
            t = tenants[k % TENANTS]
            seqs[t] += 1
            docs.append({"tenant_id": t, "seq": seqs[t], "type": "card.updated",
                         "card_id": f"c{k % CARDS}", "at": now})
        for i in range(0, len(docs), 5000):
            db["board_events"].insert_many(docs[i:i + 5000])
        db["board_event_counters"].insert_many([{"_id": t, "seq": s} for t, s in seqs.items()])

    def done(self, db_name: str, kind: str = "run") -> int:
        """Done rows, over an index in each schema (the floor's ``{state, not_before}``; our
        ``done_ttl``, through the filter the service uses): a bare ``{state: "done"}`` would scan
        our collection, and this script's own polling would load the server it measures."""
        flt: dict[str, Any] = {"state": "done"}
        if kind != "floor":
            flt = dict(IN_STATE["done"])
        return self.client[db_name]["trigger_effects"].count_documents(flt)

    def done_times(self, db_name: str, kind: str = "run") -> list[float]:
        """When each done row was marked done (its ``updated_at``, epoch seconds), sorted."""
        flt: dict[str, Any] = {"state": "done"} if kind == "floor" else dict(IN_STATE["done"])
        docs = self.client[db_name]["trigger_effects"].find(flt, {"_id": 0, "updated_at": 1})
        return sorted(float(d["updated_at"]) for d in docs
                      if isinstance(d.get("updated_at"), (int, float)))


class Server:
    """The server under test: the wire server this script started (its CPU read from /proc), or
    the one in ``MONGODB_URI`` (no CPU figure: it may be another machine)."""

    def __init__(self, uri: str, pid: int | None) -> None:
        self.uri, self.pid = uri, pid

    def cpu(self) -> float:
        return 0.0 if self.pid is None else cpu_seconds(self.pid)


STREAMS = True  # --no-streams: the replicas poll only (an experiment, not the default)
SRC = ROOT / "src"  # --src: the replicas run from this src/
BASELINE: Path | None = None  # --baseline: also run each replica count from this src/
KEEP_LOGS: Path | None = None  # --keep-logs: the replicas' logs are copied here
LOG_LEVEL = "WARNING"  # --log-level: the replicas' log level


def longest_stall(start: float, end: float, times: list[float], finished: bool) -> float:
    """The longest stretch without a done mark: between the start and the first mark, between two
    marks, and (if the run did not finish) between the last mark and the end."""
    marks = [start, *(t for t in times if start <= t <= end)]
    if not finished:
        marks.append(end)
    return max((b - a for a, b in itertools.pairwise(marks)), default=end - start)


def replica_config(uri: str, db: str, runner: str, i: int, cfg_dir: Path) -> Path:
    cfg = cfg_dir / f"{db}-r{i}.toml"
    cfg.write_text(
        f'[store]\nbackend = "mongo"\nuri = "{uri}"\ndatabase = "{db}"\n'
        f'[service]\nreplica_name = "r{i}"\nlog_level = "{LOG_LEVEL}"\nhttp_port = 0\n'
        f'[tail]\nseed = "earliest"\nchange_streams = {"true" if STREAMS else "false"}\n'
        f'[launcher]\nkind = "http"\nurl = "{runner}"\n')
    return cfg


def spawn_replica(cfg: Path, log: Path, statements: Path | None, src: Path
                  ) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT}"}
    module = "board_outbox"
    if statements is not None:
        module, env["BENCH_STATEMENT_LOG"] = "benchmarks.statement_log", str(statements)
    return subprocess.Popen([sys.executable, "-m", module, "run", "--config", str(cfg)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))


def spawn_floor(uri: str, db: str, runner: str, rows: int, statements: Path | None,
                ) -> subprocess.Popen[str]:
    env = dict(os.environ)
    args = [sys.executable, "-m", "benchmarks.floor", uri, db, runner, str(rows)]
    if statements is not None:
        env["BENCH_STATEMENT_LOG"] = str(statements)
        args = [sys.executable, "-m", "benchmarks.statement_log", "--floor", *args[3:]]
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def statements(paths: list[Path], start: float, end: float, events: int) -> dict[str, Any]:
    """Statements per event and their round-trip ms per event, by command, collection and filter
    shape (a getMore by collection: a change stream's wake is one), from the logs of
    ``statement_log.py``."""
    count: Counter[str] = Counter()
    ms: dict[str, float] = {}
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            parts = (line.split("\t") + [""] * 6)[:6]
            at, name, coll, k, shape, dur = parts
            if not start <= float(at) <= end:  # a getMore (a change stream's) counts too
                continue
            key = f"{name} {coll} {{{shape}}}".replace(" {}", "")
            count[key] += int(k)
            ms[key] = ms.get(key, 0.0) + float(dur or 0) / 1000
    return {k: {"per_event": round(count[k] / events, 3), "ms_per_event": round(ms[k] / events, 3)}
            for k, _ in count.most_common()}


def run_pipeline(store: Store, server: Server, runner: str, *, kind: str, replicas: int,
                 events: int, timeout: float, tmp: Path, log_statements: bool) -> dict[str, Any]:
    db = f"tp_{kind}{replicas}_{events}_{int(time.time() * 1000) % 10**8}"
    src = BASELINE if kind == "base" and BASELINE is not None else SRC
    store.seed(db, events)
    rows = 2 * events
    stmt = [tmp / f"{db}-{i}.statements" for i in range(max(1, replicas))] if log_statements else []
    procs: list[subprocess.Popen[Any]]
    logs: list[Path] = []
    if kind == "floor":
        floor = spawn_floor(server.uri, db, runner, rows, stmt[0] if stmt else None)
        procs = [floor]
    else:
        logs = [tmp / f"{db}-r{i}.log" for i in range(replicas)]
        procs = [spawn_replica(replica_config(server.uri, db, runner, i, tmp), logs[i],
                               stmt[i] if stmt else None, src) for i in range(replicas)]
    try:
        r0, s0, g0 = store.requests(), server.cpu(), store.getmores()
        c0 = [cpu_seconds(p.pid) for p in procs]
        start = time.time()
        if kind == "floor":
            assert floor.stdin is not None
            floor.stdin.write("go\n")
            floor.stdin.flush()
        deadline = start + timeout
        done = 0
        while time.time() < deadline:
            done = store.done(db, kind)
            if done >= rows:
                break
            # a resolution of 2% of the time so far (0.25-2 s): the poll's own cost stays small
            time.sleep(max(0.25, min(2.0, (time.time() - start) / 50)))
        end = time.time()
        reqs, server_cpu = store.requests() - r0, server.cpu() - s0
        getmores = store.getmores() - g0
        load = os.getloadavg()[0]
        busy = [cpu_seconds(p.pid) - c for p, c in zip(procs, c0, strict=True)]
        # each process's idle rate, right after (nothing left to do), subtracted
        i0 = [cpu_seconds(p.pid) for p in procs]
        time.sleep(3.0)
        idle = [(cpu_seconds(p.pid) - c) / 3.0 for p, c in zip(procs, i0, strict=True)]
        own = sum(max(0.0, b - r * (end - start)) for b, r in zip(busy, idle, strict=True))
        docs = store.client[db]["trigger_effects"]
        duplicates = docs.count_documents({}) - len(docs.distinct("row_key"))
        stall = longest_stall(start, end, store.done_times(db, kind), done >= rows)
    finally:
        stop(procs, 30)
    text = "\n".join(p.read_text(errors="replace") for p in logs if p.exists())
    if KEEP_LOGS is not None:
        KEEP_LOGS.mkdir(parents=True, exist_ok=True)
        for p in logs:
            if p.exists():
                (KEEP_LOGS / p.name).write_bytes(p.read_bytes())
    done_events = min(events, done // 2) if done < rows else events
    seconds = end - start
    out: dict[str, Any] = {
        "pipeline": kind, "replicas": replicas, "events": events, "rows_done": done,
        "finished": done >= rows, "seconds": round(seconds, 2),
        "events_per_s": round(done_events / seconds, 1),
        "server_cpu_ms_per_event": None if server.pid is None else
        round(server_cpu * 1000 / max(1, done_events), 2),
        "process_cpu_ms_per_event": round(own * 1000 / max(1, done_events), 3),
        "idle_cpu_fraction": round(sum(idle), 4),
        "requests_per_event": round(reqs / max(1, done_events), 3),
        "requests_per_event_without_getmores": round((reqs - getmores) / max(1, done_events), 3),
        "getmores_per_event": round(getmores / max(1, done_events), 3),
        "longest_stall_s": round(stall, 1),
        "load_average": round(load, 2),
        "src": "" if kind == "floor" else str(src),
        "duplicate_rows": duplicates,
        "log": {name: text.count(needle) for name, needle in SYMPTOMS.items()},
    }
    if log_statements:
        out["statements"] = statements(stmt, start, end, max(1, done_events))
    store.client.drop_database(db)
    print(json.dumps({k: v for k, v in out.items() if k != "statements"}), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backlogs", default="2000,20000")
    ap.add_argument("--replicas", default="1,2,4,8")
    ap.add_argument("--large-replicas", default="1,2,4,8",
                    help="the replica counts run at backlogs above 5,000 events (each such run "
                         "takes minutes)")
    ap.add_argument("--timeout", type=float, default=900.0, help="per pipeline, seconds")
    ap.add_argument("--src", help="run the replicas from this src/ (another checkout)")
    ap.add_argument("--baseline", metavar="SRC",
                    help="also run each replica count from this src/ (e.g. main's), interleaved")
    ap.add_argument("--statements", action="store_true",
                    help="also a run per pipeline with every command logged (statement table)")
    ap.add_argument("--only-statements", action="store_true",
                    help="only the --statements runs of the replicas (no floor, no main runs)")
    ap.add_argument("--statement-replicas", default="1",
                    help="the replica counts of the --statements runs")
    ap.add_argument("--no-streams", action="store_true",
                    help="replicas without change streams (polling only): what the streams cost")
    ap.add_argument("--keep-logs", metavar="DIR", help="copy the replicas' logs into DIR")
    ap.add_argument("--log-level", default="WARNING", help="the replicas' log level")
    ap.add_argument("--name", default="throughput")
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args()
    if args.plot_only:
        saved = json.loads((RESULTS / f"{args.name}.json").read_text())
        plot(saved["runs"], RESULTS / f"{args.name}.png")
        print(table(saved["runs"]))
        return 0
    global STREAMS, SRC, BASELINE, KEEP_LOGS, LOG_LEVEL
    STREAMS = not args.no_streams
    KEEP_LOGS = Path(args.keep_logs) if args.keep_logs else None
    LOG_LEVEL = args.log_level
    if args.src:
        SRC = Path(args.src).resolve()
    if args.baseline:
        BASELINE = Path(args.baseline).resolve()
    uri = os.environ.get("MONGODB_URI")
    wire = WireServer().start() if not uri else None
    server = Server(uri, None) if uri else Server(wire.uri, wire.pid)  # type: ignore[union-attr]
    runs: list[dict[str, Any]] = []
    tables: list[dict[str, Any]] = []
    kinds = ["run", "base"] if BASELINE is not None else ["run"]
    try:
        store = Store(server.uri)
        with tempfile.TemporaryDirectory() as d, bot_runner() as runner:
            tmp = Path(d)
            for events in (int(x) for x in args.backlogs.split(",")):
                if args.only_statements:
                    break
                runs.append(run_pipeline(store, server, runner, kind="floor", replicas=1,
                                         events=events, timeout=args.timeout, tmp=tmp,
                                         log_statements=False))
                counts = args.replicas if events <= 5000 else args.large_replicas
                for n in (int(x) for x in counts.split(",")):
                    for kind in kinds:
                        runs.append(run_pipeline(store, server, runner, kind=kind, replicas=n,
                                                 events=events, timeout=args.timeout, tmp=tmp,
                                                 log_statements=False))
            if args.statements or args.only_statements:
                events = int(args.backlogs.split(",")[0])
                if not args.only_statements:
                    tables.append(run_pipeline(store, server, runner, kind="floor", replicas=1,
                                               events=events, timeout=args.timeout, tmp=tmp,
                                               log_statements=True))
                for n in (int(x) for x in args.statement_replicas.split(",")):
                    for kind in kinds:
                        tables.append(run_pipeline(store, server, runner, kind=kind, replicas=n,
                                                   events=events, timeout=args.timeout,
                                                   tmp=tmp, log_statements=True))
    finally:
        if wire is not None:
            wire.close()
    write_result(args.name, {"runs": runs, "statement_runs": tables,
                             "setup": {"server": "MONGODB_URI" if uri else "secantusd-py (WireServer)",
                                       "tenants": TENANTS,
                                       **vars(args)}})
    if runs:
        plot(runs, RESULTS / f"{args.name}.png")
        print(table(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
