"""Catch-up after an outage: does a large backlog drain at the pace of a small one, without a
stall? ``board-outbox run`` replicas beside the bare-driver floor (``floor.py``), in one run, on
one server, each pipeline with its own fresh database holding the same backlog (10 tenants, one
subscription each that every event matches, plus ``board-reflect``: a launch and a projection
row per event), exactly as ``throughput.py`` seeds it.

What this adds to ``throughput.py``: the progress of each pipeline sampled every
``--sample`` seconds, so a run reports

- events/s (events over the time from the start to the last row done), its ratio to the floor's
  and, per pipeline, the ratio of its rate at the largest backlog to its rate at the smallest;
- the longest stretch without progress (no launch reached the bot runner, which counts them:
  the replicas run with HTTP off, as in ``throughput.py``, and nothing polls the store) and the
  server's CPU share during it (a stretch while the server is idle is the pipeline's own wait);
- store requests per event (the server's ``network.numRequests``, minus this script's own);
- the replicas' log symptoms (``throughput.SYMPTOMS``, plus lease extensions that failed);
- with ``--spy DIR``, a ``py-spy dump`` of the server and of every replica, and every replica's
  asyncio tasks (``taskdump.py``), whenever a pipeline has made no progress for ``--spy-after``
  seconds (what each is doing while it waits), and every command each replica sent, with its
  round trip (``statement_log.py``), in DIR.

``--src OTHER/src`` runs the replicas from another checkout (a baseline, e.g. main) in the same
run, labelled ``run@OTHER``.

Run: ``.venv/bin/python -m benchmarks.catchup`` (default 2,000 and 20,000 events, 1 and 2
replicas, this checkout; about 15 minutes here). Writes ``results/<name>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from board_outbox.adapters.mongo.outbox.statements import IN_STATE
from board_outbox.service.wireserver import WireServer

from .common import bot_runner, stop, write_result
from .throughput import SYMPTOMS, Server, Store, replica_config, spawn_floor

ROOT = Path(__file__).resolve().parent.parent
# more lines of a replica's log counted (beside throughput's): lease extensions that failed
EXTRA_SYMPTOMS = {"extend_failed": "could not extend"}


# The bot runner the pipelines launch at, counting the launches it answered (GET: the count):
# each pipeline's progress, sampled at no cost to the server under test (the replicas run with
# HTTP off, as in ``throughput.py``; counting done rows in the store would load it).
RUNNER = """
import sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
lock, count = threading.Lock(), [0]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def _send(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        with lock:
            count[0] += 1
        self._send(b'{"launch_id": "L"}')
    def do_GET(self):
        self._send(str(count[0]).encode())
    def log_message(self, *a):
        pass
class Server(ThreadingHTTPServer):
    request_queue_size = 256
    def handle_error(self, request, client_address):
        pass  # a pipeline stopped mid-request (at its timeout) resets its connection
s = Server(("127.0.0.1", 0), H)
s.daemon_threads = True
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def counting_runner() -> AbstractContextManager[str]:
    """The counting runner, started and stopped as ``common.bot_runner`` does its own."""
    return bot_runner(RUNNER)


def launches(runner: str) -> int:
    with urllib.request.urlopen(runner, timeout=10) as r:
        return int(r.read())


def spawn_replica(src: Path, cfg: Path, log: Path,
                  statements: Path | None = None) -> subprocess.Popen[bytes]:
    """One ``board-outbox run`` from ``src``; with ``statements``, every command it sends is
    logged there (``statement_log.py``)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    module = "board_outbox"
    if statements is not None:  # and SIGUSR1 dumps its asyncio tasks (``taskdump.py``)
        env["PYTHONPATH"] = f"{src}{os.pathsep}{ROOT}"
        module, env["BENCH_STATEMENT_LOG"] = "benchmarks.taskdump", str(statements)
        env["BENCH_TASK_DUMP"] = str(statements.with_suffix(".tasks"))
    return subprocess.Popen([sys.executable, "-m", module, "run", "--config", str(cfg)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(log, "wb"))


def spy(pids: dict[str, int], out: Path) -> None:
    """One py-spy dump of each process, appended to ``out`` (best effort); a replica also
    writes its asyncio tasks (SIGUSR1, ``taskdump.py``)."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    with out.open("a") as f:
        for name, pid in pids.items():
            if name != "server":
                os.kill(pid, signal.SIGUSR1)
            f.write(f"==== {name} pid {pid} at {time.strftime('%H:%M:%S')}\n")
            try:
                res = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True,
                                     text=True, timeout=30)
                f.write(res.stdout + res.stderr)
            except (OSError, subprocess.SubprocessError) as exc:
                f.write(f"py-spy failed: {exc}\n")


def stretch(samples: list[tuple[float, int, float]]) -> tuple[float, float]:
    """The longest time between two samples that saw progress (or from the last one to the end)
    in ``(at, done, server cpu)`` samples, and the server's CPU share (cores) during it."""
    best, share = 0.0, 0.0
    if not samples:
        return best, share
    mark = samples[0]  # the last sample that saw progress (the first one: the start)
    for i, s in enumerate(samples[1:], 1):
        if s[1] != samples[i - 1][1] or i == len(samples) - 1:
            span = s[0] - mark[0]
            if span > best:
                best, share = span, (s[2] - mark[2]) / span if span > 0 else 0.0
            mark = s
    return best, share


def shape(value: Any) -> Any:
    """A command's filter or update with its values elided: keys, operators, list sizes."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return f"[{len(value)}]" if len(value) > 3 else [shape(v) for v in value]
    return type(value).__name__


def slow_commands(store: Store, db: str) -> list[dict[str, Any]]:
    """The slowest commands the server profiled in ``db``, their shapes only."""
    out = []
    for e in store.client[db]["system.profile"].find().sort("millis", -1).limit(20):
        cmd = e.get("command") or {}
        out.append({"millis": e.get("millis"), "op": e.get("op"), "ns": e.get("ns"),
                    "command": shape({k: v for k, v in cmd.items()
                                      if k not in ("lsid", "$db", "$clusterTime")})})
    return out


def settled(store: Store, db: str, rows: int) -> bool:
    """Every row is in and none is live: the collection holds ``rows`` rows (its metadata count)
    and no row is pending or claimed (two counts over those states' partial indexes: small at
    the end of a run, where a count of the done rows would read every one of them, seconds on
    this server, while the replicas still run beside it)."""
    coll = store.client[db]["trigger_effects"]
    if coll.estimated_document_count() < rows:
        return False
    return all(coll.count_documents(IN_STATE[s], limit=1) == 0 for s in ("pending", "claimed"))


def run_pipeline(store: Store, server: Server, runner: str, *, kind: str, src: Path, label: str,
                 replicas: int, events: int, timeout: float, sample: float, tmp: Path,
                 spy_dir: Path | None, spy_after: float, profile_ms: int) -> dict[str, Any]:
    db = f"cu_{kind}{replicas}_{events}_{int(time.time() * 1000) % 10**8}"
    store.seed(db, events)
    if profile_ms:
        store.client[db].command("profile", 1, slowms=profile_ms)
    rows = 2 * events
    logs: list[Path] = []
    procs: list[subprocess.Popen[Any]]
    if kind == "floor":
        floor = spawn_floor(server.uri, db, runner, rows, None)
        procs = [floor]
    else:
        logs = [tmp / f"{db}-r{i}.log" for i in range(replicas)]
        procs = [spawn_replica(src, replica_config(server.uri, db, runner, i, tmp), logs[i],
                               None if spy_dir is None else spy_dir / f"{db}-r{i}.statements")
                 for i in range(replicas)]
    samples: list[tuple[float, int, float]] = []
    try:
        r0, s0 = store.requests(), server.cpu()
        start = time.time()
        if kind == "floor":
            assert floor.stdin is not None
            floor.stdin.write("go\n")
            floor.stdin.flush()
        deadline = start + timeout
        done = 0
        last_change, spied_at = start, 0.0
        base = launches(runner)
        while time.time() < deadline:
            # progress: the launches answered (one per event); the store is asked only at the
            # end, or when the launches are all in
            done = launches(runner) - base
            now = time.time()
            if samples and done != samples[-1][1]:
                last_change = now
            samples.append((now - start, done, server.cpu() - s0))
            if done >= events and (settled(store, db, rows) if kind != "floor" else
                                   store.done(db, kind) >= rows):
                break
            if (spy_dir is not None and now - last_change >= spy_after
                    and now - spied_at >= spy_after):
                spied_at = now
                pids = {"server": server.pid} if server.pid else {}
                pids.update({f"{label}-r{i}": p.pid for i, p in enumerate(procs)})
                spy(pids, spy_dir / f"{db}.spy.txt")
            time.sleep(sample)
        end = time.time()
        done = store.done(db, kind)
        reqs, server_cpu = store.requests() - r0, server.cpu() - s0
    finally:
        stop(procs, 30)
    text = "\n".join(p.read_text(errors="replace") for p in logs if p.exists())
    if spy_dir is not None:
        for p in logs:
            if p.exists():
                shutil.copy(p, spy_dir / p.name)
    done_events = min(events, done // 2) if done < rows else events
    seconds = end - start
    longest, share = stretch(samples)
    out: dict[str, Any] = {
        "pipeline": label, "replicas": replicas, "events": events, "rows_done": done,
        "finished": done >= rows, "seconds": round(seconds, 2),
        "events_per_s": round(done_events / seconds, 1),
        "server_cpu_ms_per_event": None if server.pid is None else
        round(server_cpu * 1000 / max(1, done_events), 2),
        "requests_per_event": round(reqs / max(1, done_events), 3),
        "longest_no_progress_s": round(longest, 1),
        "server_cores_then": round(share, 2),
        "log": {name: text.count(needle)
                for name, needle in {**SYMPTOMS, **EXTRA_SYMPTOMS}.items()},
        "progress": [(round(a, 1), d) for a, d, _ in samples],
    }
    if profile_ms:
        out["slow_commands"] = slow_commands(store, db)
    if spy_dir is not None:  # the replicas' commands, per event, by command and collection
        out["commands_per_event"] = commands_per_event(
            [spy_dir / f"{db}-r{i}.statements" for i in range(replicas)], start, end,
            max(1, done_events))
    store.client.drop_database(db)
    print(json.dumps({k: v for k, v in out.items()
                      if k not in ("progress", "slow_commands", "commands_per_event")}), flush=True)
    if "commands_per_event" in out:
        print("  commands/event:", json.dumps(dict(list(out["commands_per_event"].items())[:8])),
              flush=True)
    return out


def commands_per_event(paths: list[Path], start: float, end: float,
                       events: int) -> dict[str, float]:
    """Commands per event by command and collection (a getMore too), from ``statement_log.py``
    logs, between ``start`` and ``end``."""
    count: dict[str, int] = {}
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            at, name, coll = [*line.split("\t"), "", "", ""][:3]
            if start <= float(at) <= end:
                count[f"{name} {coll}"] = count.get(f"{name} {coll}", 0) + 1
    return {k: round(v / events, 3) for k, v in sorted(count.items(), key=lambda kv: -kv[1])}


def table(runs: list[dict[str, Any]]) -> str:
    """The runs as a markdown table: ratios to the same backlog's floor and to the pipeline's
    own rate at the smallest backlog."""
    small = min(r["events"] for r in runs)
    floor = {r["events"]: r["events_per_s"] for r in runs if r["pipeline"] == "floor"}
    base = {(r["pipeline"], r["replicas"]): r["events_per_s"] for r in runs if r["events"] == small}
    lines = ["| pipeline | replicas | events | events/s | vs floor | vs own at "
             f"{small:,} | requests/event | longest stretch without progress (s) | log |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        f = floor.get(r["events"])
        b = base.get((r["pipeline"], r["replicas"]))
        bad = ", ".join(f"{k} {v}" for k, v in r["log"].items() if v) or "-"
        vs_floor = f"{r['events_per_s'] / f:.2f}x" if f else "-"
        vs_own = f"{r['events_per_s'] / b:.2f}x" if b else "-"
        lines.append(f"| {r['pipeline']} | {r['replicas']} | {r['events']:,} | "
                     f"{r['events_per_s']} | {vs_floor} | {vs_own} | {r['requests_per_event']} | "
                     f"{r['longest_no_progress_s']} | {bad} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backlogs", default="2000,20000")
    ap.add_argument("--replicas", default="1,2")
    ap.add_argument("--src", action="append", default=[],
                    help="also run the replicas from this src/ (a baseline checkout); repeatable")
    ap.add_argument("--no-floor", action="store_true")
    ap.add_argument("--skip-this", action="store_true",
                    help="run only the --src checkouts' replicas, not this one's")
    ap.add_argument("--timeout", type=float, default=900.0, help="per pipeline, seconds")
    ap.add_argument("--sample", type=float, default=1.0, help="progress sample, seconds")
    ap.add_argument("--spy", type=Path, help="py-spy dumps (and the replicas' logs) go here")
    ap.add_argument("--spy-after", type=float, default=8.0)
    ap.add_argument("--profile-ms", type=int, default=0,
                    help="the server profiles commands slower than this (0: off); the slowest "
                         "20 of each pipeline are kept, shapes only")
    ap.add_argument("--name", default="catchup")
    args = ap.parse_args()
    uri = os.environ.get("MONGODB_URI")
    wire = WireServer().start() if not uri else None
    server = Server(uri, None) if uri else Server(wire.uri, wire.pid)  # type: ignore[union-attr]
    sources = ([] if args.skip_this else [(ROOT / "src", "run")]) + [
        (Path(s).resolve(), f"run@{Path(s).resolve().parent.name}") for s in args.src]
    if args.spy is not None:
        args.spy.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    try:
        store = Store(server.uri)
        with tempfile.TemporaryDirectory() as d, counting_runner() as runner:
            tmp = Path(d)
            for events in (int(x) for x in args.backlogs.split(",")):
                if not args.no_floor:
                    runs.append(run_pipeline(
                        store, server, runner, kind="floor", src=ROOT / "src", label="floor",
                        replicas=1, events=events, timeout=args.timeout, sample=args.sample,
                        tmp=tmp, spy_dir=None, spy_after=args.spy_after,
                        profile_ms=args.profile_ms))
                for n in (int(x) for x in args.replicas.split(",")):
                    for src, label in sources:
                        runs.append(run_pipeline(
                            store, server, runner, kind="run", src=src, label=label, replicas=n,
                            events=events, timeout=args.timeout, sample=args.sample, tmp=tmp,
                            spy_dir=args.spy, spy_after=args.spy_after,
                            profile_ms=args.profile_ms))
    finally:
        if wire is not None:
            wire.close()
    print(table(runs))
    write_result(args.name, {"runs": runs, "table": table(runs),
                             "setup": {"server": "MONGODB_URI" if uri else "secantusd-py",
                                       **{k: str(v) for k, v in vars(args).items()}}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
