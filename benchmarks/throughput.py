"""Throughput at the store's floor (issue 29, T1): a saturated backlog drained by ``board-outbox
run`` replicas (1, 2, 4) beside the bare-driver floor (``floor.py``), in one run, on one server.

For each backlog (default 2,000 and 20,000 events; 10 tenants, one subscription each that every
event matches, plus the default projection ``board-reflect``: two rows per event, launches over
HTTP to a local bot runner), every pipeline gets a fresh database with the same events already
in the log, then runs until every row is done. Measured for each:

- events/s: events over the time from the start to the last row done;
- the server's CPU per event (utime + stime of the server process, from /proc);
- the pipeline's own CPU per event: the whole process(es) -- every ``board-outbox run``, or the
  floor's process -- with each one's idle rate (measured right after, nothing to do) subtracted;
- store requests per event: the server's ``network.numRequests``, minus this script's own;
- from the replicas' logs: store timeouts that aborted a batch, "done but not recorded", and
  tenants reported stalled (each must be 0);
- with ``--statements``, one more run per pipeline with every command logged by the client
  (``statement_log.py``): statements per event by command, collection and filter shape, and
  their round-trip milliseconds per event (the server is single-threaded here: its time).

Run: ``.venv/bin/python -m benchmarks.throughput`` (``--backlogs 2000 --replicas 1`` for a quick
look). Writes ``results/throughput.json`` and ``throughput.png``.
"""

from __future__ import annotations

import argparse
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

from board_outbox.adapters.mongo.outbox import IN_STATE
from board_outbox.service.wireserver import WireServer

from .common import (
    RESULTS,
    CommandCount,
    bot_runner,
    cpu_seconds,
    pyplot,
    server_requests,
    stop,
    write_result,
)

ROOT = Path(__file__).resolve().parent.parent
TENANTS = 10
CARDS = 20
# what a replica's log says when it aborted a batch on a store timeout, gave up a done mark, or
# found a tenant stalled (issue 29: none of them may happen under mere overload)
SYMPTOMS = {"aborted": "batch aborted, cursor untouched", "unrecorded": "done but not recorded",
            "stalled": "stalled"}


class Store:
    """This script's own client (its commands counted, to be subtracted from the server's)."""

    def __init__(self, uri: str) -> None:
        self.counter = CommandCount()
        self.client: MongoClient[dict[str, Any]] = MongoClient(uri, event_listeners=[self.counter])

    def requests(self) -> int:
        return server_requests(self.client, self.counter)

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


class Server:
    """The server under test: the wire server this script started (its CPU read from /proc), or
    the one in ``MONGODB_URI`` (no CPU figure: it may be another machine)."""

    def __init__(self, uri: str, pid: int | None) -> None:
        self.uri, self.pid = uri, pid

    def cpu(self) -> float:
        return 0.0 if self.pid is None else cpu_seconds(self.pid)


STREAMS = True  # --no-streams: the replicas poll only (an experiment, not the default)


def replica_config(uri: str, db: str, runner: str, i: int, cfg_dir: Path) -> Path:
    cfg = cfg_dir / f"{db}-r{i}.toml"
    cfg.write_text(
        f'[store]\nbackend = "mongo"\nuri = "{uri}"\ndatabase = "{db}"\n'
        f'[service]\nreplica_name = "r{i}"\nlog_level = "WARNING"\nhttp_port = 0\n'
        f'[tail]\nseed = "earliest"\nchange_streams = {"true" if STREAMS else "false"}\n'
        f'[launcher]\nkind = "http"\nurl = "{runner}"\n')
    return cfg


def spawn_replica(cfg: Path, log: Path, statements: Path | None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
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
                               stmt[i] if stmt else None) for i in range(replicas)]
    try:
        r0, s0 = store.requests(), server.cpu()
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
        busy = [cpu_seconds(p.pid) - c for p, c in zip(procs, c0, strict=True)]
        # each process's idle rate, right after (nothing left to do), subtracted
        i0 = [cpu_seconds(p.pid) for p in procs]
        time.sleep(3.0)
        idle = [(cpu_seconds(p.pid) - c) / 3.0 for p, c in zip(procs, i0, strict=True)]
        own = sum(max(0.0, b - r * (end - start)) for b, r in zip(busy, idle, strict=True))
        docs = store.client[db]["trigger_effects"]
        duplicates = docs.count_documents({}) - len(docs.distinct("row_key"))
    finally:
        stop(procs, 30)
    text = "\n".join(p.read_text(errors="replace") for p in logs if p.exists())
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
        "duplicate_rows": duplicates,
        "log": {name: text.count(needle) for name, needle in SYMPTOMS.items()},
    }
    if log_statements:
        out["statements"] = statements(stmt, start, end, max(1, done_events))
    store.client.drop_database(db)
    print(json.dumps({k: v for k, v in out.items() if k != "statements"}), flush=True)
    return out


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    backlogs = sorted({r["events"] for r in runs})
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    labels = ["floor"] + [f"{n} replica{'s' if n > 1 else ''}" for n in
                          sorted({r["replicas"] for r in runs if r["pipeline"] == "run"})]
    width = 0.8 / len(labels)
    for ax, key, title in zip(axes, ("events_per_s", "server_cpu_ms_per_event",
                                     "requests_per_event"),
                              ("events/s (higher is better)", "server CPU ms per event",
                               "store requests per event"), strict=True):
        for j, label in enumerate(labels):
            ys = []
            for b in backlogs:
                match = [r for r in runs if r["events"] == b and (
                    (label == "floor" and r["pipeline"] == "floor") or
                    (r["pipeline"] == "run" and label.startswith(f"{r['replicas']} ")))]
                ys.append(match[0][key] if match else 0)
            ax.bar([i + j * width for i in range(len(backlogs))], ys, width, label=label)
        ax.set_xticks([i + width * (len(labels) - 1) / 2 for i in range(len(backlogs))])
        ax.set_xticklabels([f"{b:,} events" for b in backlogs])
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.suptitle("board-outbox run vs the bare-driver floor, same server, same run "
                 "(SecantusDB wire server, 10 tenants, a launch and a projection row per event)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backlogs", default="2000,20000")
    ap.add_argument("--replicas", default="1,2,4")
    ap.add_argument("--large-replicas", default="1,2",
                    help="the replica counts run at backlogs above 5,000 events (each such run "
                         "takes minutes)")
    ap.add_argument("--timeout", type=float, default=900.0, help="per pipeline, seconds")
    ap.add_argument("--statements", action="store_true",
                    help="also a run per pipeline with every command logged (statement table)")
    ap.add_argument("--only-statements", action="store_true",
                    help="only the --statements runs of the replicas (no floor, no main runs)")
    ap.add_argument("--statement-replicas", default="1",
                    help="the replica counts of the --statements runs")
    ap.add_argument("--no-streams", action="store_true",
                    help="replicas without change streams (polling only): what the streams cost")
    ap.add_argument("--name", default="throughput")
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args()
    if args.plot_only:
        saved = json.loads((RESULTS / f"{args.name}.json").read_text())
        plot(saved["runs"], RESULTS / f"{args.name}.png")
        return 0
    global STREAMS
    STREAMS = not args.no_streams
    uri = os.environ.get("MONGODB_URI")
    wire = WireServer().start() if not uri else None
    server = Server(uri, None) if uri else Server(wire.uri, wire.pid)  # type: ignore[union-attr]
    runs: list[dict[str, Any]] = []
    tables: list[dict[str, Any]] = []
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
                    runs.append(run_pipeline(store, server, runner, kind="run", replicas=n,
                                             events=events, timeout=args.timeout, tmp=tmp,
                                             log_statements=False))
            if args.statements or args.only_statements:
                events = int(args.backlogs.split(",")[0])
                if not args.only_statements:
                    tables.append(run_pipeline(store, server, runner, kind="floor", replicas=1,
                                               events=events, timeout=args.timeout, tmp=tmp,
                                               log_statements=True))
                for n in (int(x) for x in args.statement_replicas.split(",")):
                    tables.append(run_pipeline(store, server, runner, kind="run", replicas=n,
                                               events=events, timeout=args.timeout, tmp=tmp,
                                               log_statements=True))
    finally:
        if wire is not None:
            wire.close()
    write_result(args.name, {"runs": runs, "statement_runs": tables,
                             "setup": {"server": "MONGODB_URI" if uri else "secantusd-py (WireServer)",
                                       "tenants": TENANTS,
                                       **vars(args)}})
    if runs:
        plot(runs, RESULTS / f"{args.name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
