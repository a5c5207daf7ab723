"""The short path against its bare-driver floor: insert -> launch
received, store requests, store round trips before the POST, and whole-process CPU per event,
for ``board-outbox run`` (1 and 4 processes) and the latency floor (``floor_follow.py``), in one
run, repeats alternated, each run on a fresh wire server by default (``--server``: SecantusDB
slows down per request over a long session, so one server for everything would charge the later
runs for the earlier ones; with ``MONGODB_URI``, that server for all).

The product is the real CLI process (``python -m board_outbox run``) as it runs in production:
change streams on, telemetry on (``OTEL_TRACES_EXPORTER`` and ``OTEL_METRICS_EXPORTER`` =
``otlp`` over HTTP to the local sink in ``runner.py``), the operator port on (which turns on the
per-tenant status refresh; nothing scrapes it), log level INFO, HTTP launches to the recording
runner (``runner.py``), one launch subscription per tenant that every event matches, and no
projection (``--projection``: ``board-reflect`` on both sides). The floor is one process doing
the same job with nothing of ours. Every pipeline gets a fresh database, the same seeded
subscriptions and cards, and the same events from this script's own client: a counter
``$inc`` then the insert, one event at a time on a schedule (a trickle), or every event in one
``insert_many`` (a backlog).

Cases (``--latency``, ``--trickle``, ``--backlog``: events, rate/s, tenants): ``latency`` 200
events at 5/s over 4 tenants; ``trickle`` 200 at 40/s over 20; ``backlog`` 2,000 at once over 20.
For each run:

- insert -> launch received, p50/p95/p99: the runner's arrival time minus the time this
  script sent the event's insert (the same clock: one machine);
- store requests per event: the server's ``network.numRequests`` over the load (first insert to
  the last row done), minus this script's own requests (``server_requests``), and the change
  streams' getMores apart (the server's ``opcounters.getmore``: this script sends none);
- whole-process CPU per event: utime + stime from /proc of every pipeline process from the
  first insert to ``--tail-seconds`` (6 s) after the last row is done (so that the export of the
  load's spans, every 5 s, is in it), less each process's idle rate (measured over
  ``--idle-seconds`` before the load) times that window; also with the idle included;
- the server process's CPU per event, its idle rate (with the pipeline idle beside it)
  subtracted the same way (only when this script started the server);
- an ``inserts`` pipeline (no consumer) prices this script's own inserts on the server.

Then, once per case for the floor and each product at 1 process: a run with every command the
pipeline sends logged (``statement_log.py``): the commands it started between an event's insert
and its launch's arrival (``shortpath_report.round_trips``); and a py-spy profile of the product
process under the ``latency`` trickle and the backlog (``pyspy.py``).

Run: ``.venv/bin/python -m benchmarks.shortpath`` (about 30 minutes here; add ``--src
OTHER/src`` to measure another checkout beside this one). Writes ``results/shortpath.json``,
``shortpath.png`` and ``shortpath-profile-*.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from board_outbox.service.wireserver import WireServer

from . import pyspy, shortpath_report
from .common import RESULTS, cpu_seconds, percentiles, stop, write_result
from .runner import recording_runner
from .shortpath_pipelines import Case, Ctx, Pipeline, Sent, Store, spawn
from .throughput import Server


def _cpu(procs: list[subprocess.Popen[Any]]) -> list[float]:
    return [cpu_seconds(p.pid) for p in procs]


def _symptoms(logs: list[Path]) -> dict[str, Any]:
    levels: Counter[str] = Counter()
    first: list[str] = []
    for path in logs:
        for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
            for level in ("ERROR", "WARNING", "Traceback"):
                if level in line:
                    levels[level] += 1
                    if len(first) < 5 and line not in first:
                        first.append(line[:300])
    return {"counts": dict(levels), "first": first}


def run_once(ctx: Ctx, case: Case, pipe: Pipeline, repeat: int, *, statements: bool = False,
             profile: str | None = None) -> dict[str, Any]:
    store, server, args = ctx.store, ctx.server, ctx.args
    db = f"sp_{pipe.kind}{pipe.replicas}_{case.name}_{int(time.time() * 1000) % 10**9}"
    names = store.seed(db, case.tenants)
    rows = case.events * (2 if args.projection else 1)
    sp = spawn(ctx, pipe, db, statements)
    prof: pyspy.Profile | None = None
    try:
        time.sleep(args.settle_seconds)  # start-up work (first polls, joins) out of the idle
        i_r, i_g, i_s, i_c, i_t = store.requests(), store.getmores(), server.cpu(), _cpu(sp.procs), \
            time.time()
        time.sleep(args.idle_seconds)
        idle_t = time.time() - i_t
        idle_req = (store.requests() - i_r) / idle_t
        idle_gm = (store.getmores() - i_g) / idle_t
        idle_srv = (server.cpu() - i_s) / idle_t
        idle_cpu = [(c - c0) / idle_t for c, c0 in zip(_cpu(sp.procs), i_c, strict=True)]
        _, otlp0 = ctx.runner.arrivals(clear=True)
        if profile is not None and ctx.py_spy and sp.procs:
            prof = pyspy.Profile(ctx.py_spy, sp.procs[0].pid, ctx.tmp / f"{db}.folded")
            prof.start()
            time.sleep(1.0)  # py-spy attached
        r0, g0, s0, c0 = store.requests(), store.getmores(), server.cpu(), _cpu(sp.procs)
        start = time.time()
        sent: list[Sent] = []
        if case.rate > 0:
            for k in range(case.events):
                if (pause := start + k / case.rate - time.time()) > 0:
                    time.sleep(pause)
                sent.append(store.emit(db, names[k % len(names)], k))
        else:
            sent = store.backlog(db, names, case.events)
        done = 0
        deadline = time.time() + args.timeout
        while pipe.kind != "inserts" and time.time() < deadline:
            done = store.done(db, pipe.kind)
            if done >= rows:
                break
            time.sleep(0.1 if case.rate > 0 else 0.25)
        end = time.time()
        r1, g1 = store.requests(), store.getmores()
        if pipe.kind != "inserts":  # work deferred past the last row (the spans' export) counts
            time.sleep(args.tail_seconds)
        cpu_end, s1, c1 = time.time(), server.cpu(), _cpu(sp.procs)
        profiled = prof.stop() if prof is not None else None
        arrivals, otlp_bytes = ctx.runner.arrivals(clear=True)
    finally:
        stop(sp.procs, 20)
    store.client.drop_database(db)
    seconds, cpu_seconds_, n = end - start, cpu_end - start, case.events
    busy = [b - a for a, b in zip(c0, c1, strict=True)]
    own = sum(busy) - sum(idle_cpu) * cpu_seconds_
    first: dict[tuple[str, int], float] = {}
    for a in sorted(arrivals, key=lambda a: a.at):
        first.setdefault((a.tenant_id, a.seq), a.at)
    lat = [(first[(s.tenant, s.seq)] - s.at) * 1000 for s in sent if (s.tenant, s.seq) in first]
    keys = Counter(a.row_key for a in arrivals)
    out: dict[str, Any] = {
        "case": case.name, "pipeline": pipe.label, "kind": pipe.kind, "replicas": pipe.replicas,
        "repeat": repeat, "events": n, "rows_expected": rows, "rows_done": done,
        "finished": pipe.kind == "inserts" or done >= rows, "seconds": round(seconds, 3),
        "insert_to_launch_ms": {k: round(v, 2) for k, v in percentiles(lat).items()},
        "insert_round_trip_ms": {k: round(v, 2) for k, v in
                                 percentiles([(s.acked - s.at) * 1000 for s in sent]).items()},
        "launches": len(arrivals), "duplicate_launches": sum(c - 1 for c in keys.values()),
        "missing_launches": 0 if pipe.kind == "inserts" else sum(
            (s.tenant, s.seq) not in first for s in sent),
        "requests_per_event": round((r1 - r0) / n, 3),
        "getmores_per_event": round((g1 - g0) / n, 3),
        "requests_per_event_without_getmores": round((r1 - r0 - (g1 - g0)) / n, 3),
        "idle_requests_per_s": round(idle_req, 2), "idle_getmores_per_s": round(idle_gm, 2),
        "process_cpu_ms_per_event": round(own * 1000 / n, 3),
        "process_cpu_ms_per_event_idle_included": round(sum(busy) * 1000 / n, 3),
        "process_idle_cpu_fraction": round(sum(idle_cpu), 4),
        "server_cpu_ms_per_event": None if server.pid is None else
        round((s1 - s0 - idle_srv * cpu_seconds_) * 1000 / n, 3),
        "server_cpu_ms_per_event_idle_included": None if server.pid is None else
        round((s1 - s0) * 1000 / n, 3),
        "server_idle_cpu_fraction": None if server.pid is None else round(idle_srv, 4),
        "cpu_window_seconds": round(cpu_seconds_, 3),
        "otlp_bytes": otlp_bytes - otlp0,
        "log": _symptoms(sp.logs),
    }
    if statements:
        out["round_trips"] = shortpath_report.round_trips(
            sp.statements, [(s.tenant, s.seq, s.at) for s in sent], first)
    if profile is not None:
        out["profile"] = _profile(ctx, pipe, case, prof, profiled, busy[0] if busy else 0.0)
    print(json.dumps({k: v for k, v in out.items() if k not in ("round_trips", "profile")}),
          flush=True)
    return out


def _profile(ctx: Ctx, pipe: Pipeline, case: Case, prof: pyspy.Profile | None,
             problem: str | None, cpu: float) -> dict[str, Any]:
    if prof is None:
        return {"error": "py-spy not found (the bench extra installs it; or --py-spy PATH)"}
    if problem is not None:
        return {"error": problem}
    summary = pyspy.summary(prof.out)
    name = f"{ctx.args.name}-profile-{pipe.label.replace('@', '-')}-{case.name}.txt"
    title = (f"py-spy: {pipe.label} ({pipe.replicas} process), case {case.name} "
             f"({case.events} events, {'at once' if not case.rate else f'{case.rate:g}/s'}, "
             f"{case.tenants} tenants), from the first insert to {ctx.args.tail_seconds:g} s "
             f"after the last row done; the process's CPU (utime + stime) in that window: "
             f"{cpu:.2f} s, i.e. {cpu * pyspy.RATE:.0f} samples' worth")
    (RESULTS / name).write_text(pyspy.as_text(title, summary))
    return {"file": name, **summary}


@contextmanager
def own_server(ctx: Ctx, fresh: bool) -> Iterator[None]:
    """A fresh wire server (and this script's client on it) for what runs inside, when
    ``fresh``: SecantusDB gets slower per request over a session of runs (the server CPU of
    this script's own inserts at 40/s went from 2.0 to 19.6 ms per event over one session), so
    each run meeting a fresh server keeps the later cases and pipelines from paying for the
    earlier ones."""
    if not fresh:
        yield
        return
    saved = ctx.server, ctx.store
    with WireServer() as wire:
        ctx.server, ctx.store = Server(wire.uri, wire.pid), Store(wire.uri)
        try:
            yield
        finally:
            ctx.store.client.close()
            ctx.server, ctx.store = saved


def pipelines(args: argparse.Namespace) -> list[Pipeline]:
    out = [Pipeline("floor", "floor")]
    variants: list[tuple[str, Path | None]] = [("run", None)]
    if args.src:
        other = Path(args.src).resolve()
        variants.append((f"run@{args.src_name or other.parent.name}", other))
    for label, src in variants:
        out += [Pipeline(f"{label}x{n}", "run", n, src) for n in
                (int(x) for x in args.replicas.split(","))]
    return out


def cases(args: argparse.Namespace) -> list[Case]:
    def parse(name: str, spec: str) -> Case:
        parts = [float(x) for x in spec.split(",")]
        if name == "backlog":
            return Case(name, int(parts[0]), 0.0, int(parts[1]))
        return Case(name, int(parts[0]), parts[1], int(parts[2]))

    return [parse(name, getattr(args, name)) for name in args.cases.split(",")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="latency,trickle,backlog")
    ap.add_argument("--latency", default="200,5,4", help="events,rate/s,tenants")
    ap.add_argument("--trickle", default="200,40,20", help="events,rate/s,tenants")
    ap.add_argument("--backlog", default="2000,20", help="events,tenants (inserted at once)")
    ap.add_argument("--replicas", default="1,4")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--src", help="also measure the product from this src/ (another checkout)")
    ap.add_argument("--src-name", help="its label (default: the checkout's directory name)")
    ap.add_argument("--projection", action="store_true",
                    help="the board-reflect projection on (a projection row per event, both sides)")
    ap.add_argument("--no-ops-port", action="store_true",
                    help="a diagnosis, not production: the replicas' operator port off (and with "
                         "it the per-tenant status refresh)")
    ap.add_argument("--server", choices=("run", "case", "session"), default="run",
                    help="a fresh wire server for every run (default), for every case, or one "
                         "for the whole session (ignored with MONGODB_URI)")
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--settle-seconds", type=float, default=3.0)
    ap.add_argument("--tail-seconds", type=float, default=6.0,
                    help="the CPU window goes on this long after the last row is done: the "
                         "spans' export (every 5 s) of the load's spans is in it")
    ap.add_argument("--timeout", type=float, default=300.0, help="per run, after the load")
    ap.add_argument("--no-statements", action="store_true", help="skip the statement-log runs")
    ap.add_argument("--no-profile", action="store_true", help="skip the py-spy runs")
    ap.add_argument("--py-spy", help="the py-spy binary (default: beside python, else PATH)")
    ap.add_argument("--name", default="shortpath")
    ap.add_argument("--plot-only", action="store_true",
                    help="re-draw and re-print results/NAME.* from results/NAME.json")
    args = ap.parse_args()
    if args.plot_only:
        saved = json.loads((RESULTS / f"{args.name}.json").read_text())
        saved.update(shortpath_report.summarize(saved))
        shortpath_report.plot(saved, RESULTS / f"{args.name}.png")
        print(shortpath_report.as_text(saved))
        return 0
    uri = os.environ.get("MONGODB_URI")
    wire = WireServer().start() if not uri else None
    server = Server(uri, None) if uri else Server(wire.uri, wire.pid)  # type: ignore[union-attr]
    runs: list[dict[str, Any]] = []
    extra: list[dict[str, Any]] = []
    load = [os.getloadavg()]
    try:
        with tempfile.TemporaryDirectory() as d, recording_runner() as runner:
            ctx = Ctx(Store(server.uri), server, runner, Path(d), args,
                      None if args.no_profile else pyspy.find_py_spy(args.py_spy))
            pipes = pipelines(args)
            fresh = uri is None and args.server == "run"

            def measure(case: Case, pipe: Pipeline, rep: int, **kw: Any) -> dict[str, Any]:
                with own_server(ctx, fresh):
                    return run_once(ctx, case, pipe, rep, **kw)

            for case in cases(args):
                with own_server(ctx, uri is None and args.server == "case"):
                    runs.append(measure(case, Pipeline("inserts", "inserts"), 0))
                    for rep in range(args.repeats):
                        k = rep % len(pipes)  # alternate: each repeat starts one pipeline later
                        for pipe in pipes[k:] + pipes[:k]:
                            runs.append(measure(case, pipe, rep))
                            load.append(os.getloadavg())
                    one = [p for p in pipes if p.replicas == 1]
                    if not args.no_statements and case.name == "latency":
                        extra += [measure(case, p, 0, statements=True) for p in one]
                    if not args.no_profile and case.name in ("latency", "backlog"):
                        extra += [measure(case, p, 0, profile="py-spy") for p in one
                                  if p.kind == "run"]
            notes = ctx.notes
    finally:
        if wire is not None:
            wire.close()
    doc = {"runs": runs, "instrumented_runs": extra, "notes": notes,
           "load_average_1_5_15": {"min": [round(min(x[i] for x in load), 2) for i in range(3)],
                                   "max": [round(max(x[i] for x in load), 2) for i in range(3)]},
           "setup": {"server": "MONGODB_URI" if uri else "secantusd-py (WireServer)",
                     **vars(args)}}
    doc.update(shortpath_report.summarize(doc))
    write_result(args.name, doc)
    shortpath_report.plot(doc, RESULTS / f"{args.name}.png")
    print(shortpath_report.as_text(doc), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
