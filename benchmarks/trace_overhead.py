"""What tracing costs (C7): the whole ``board-outbox run`` process's CPU per event with tracing
off, sampling every trace, and ``parentbased_traceidratio`` at 0.01 -- in one run, on the wire.

Every pipeline gets a fresh database with the same backlog (default 1,000 events over 10
tenants, one subscription each that every event matches plus the default projection
``board-reflect``: a launch row and a projection row per event, launches over HTTP to a local
bot runner, as ``throughput.py``), then one ``board-outbox run`` drains it until every row is
done. The events carry their producer's W3C context (``trace``) as ``board_outbox.producer.emit``
writes it: for the sampled configurations the producer sampled them alike (every one at 100%;
at 0.01, the ones the same trace-id ratio keeps). Spans go over OTLP/HTTP to the in-repo
receiver in another process (its CPU is not counted). Configurations:

- ``off``: no OTEL_* exporter (the API's no-op; contexts are still parsed and passed on);
- ``off-no-context``: the same, events without a context;
- ``100%``: ``parentbased_always_on`` (every trace sampled, exported);
- ``100%-no-context``: the same, events without a context (no per-event span: what the
  ``materialize`` span per event costs is the difference);
- ``0.01``: ``parentbased_traceidratio`` with ``OTEL_TRACES_SAMPLER_ARG=0.01``;
- ``baseline-off`` (with ``--baseline-src``): ``off`` on another checkout, e.g. before tracing
  passed the stored contexts on.

A round runs every configuration **at once**, each its own process, database and receiver on
the one server, so the machine's load -- other jobs vary it by the minute here, and a pipeline
slowed by it spends more CPU per event on its polls and smaller batches -- weighs on all of
them alike. Per process: spawned on the board without events and left to start up (imports
differ between configurations: the exporters); then its backlog is written (counters, then
events, as producers write them) and its CPU (every thread's, in nanoseconds from
``/proc/PID/task/*/schedstat``) is taken from there to its last row done and the exporter's last
batch out (6 s after the last pipeline finished), minus its idle rate measured right after
(10 s, nothing to do) times that time, per event; and the spans its receiver got.
``--rounds`` rounds; each figure is the median of its rounds, each ratio is against ``off`` of
the same round.

Beside it, ``--in-process-events``: the same pipeline on the memory twins in this process (a
``Service`` driven by its own passes, HTTP launches, OTLP export): no server to vary the pace,
so the tracing cost per event (µs) is steady; its share of the wire's ``off`` figure is a
second reading of the overhead.

Run: ``.venv/bin/python -m benchmarks.trace_overhead`` (``--events 300 --rounds 1`` for a quick
look; ``--configs off,off-no-context,100%,100%-no-context`` for what the context and the span per
event cost). Writes ``results/trace-overhead.json`` and ``trace-overhead.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from board_outbox.service.wireserver import WireServer

from . import trace_overhead_wire
from .common import RESULTS, bot_runner, write_result
from .trace_overhead_inprocess import in_process
from .trace_overhead_report import plot, summary
from .trace_overhead_wire import CONFIGS, TENANTS, Receiver, run_round


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1000, help="per pipeline")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--configs", default="off,100%,0.01",
                    help=f"of {', '.join(CONFIGS).replace('%', '%%')} (a round runs them side by side: "
                         "more than three or four saturate a single-threaded wire server)")
    ap.add_argument("--timeout", type=float, default=900.0, help="per round, seconds")
    ap.add_argument("--name", default="trace-overhead")
    ap.add_argument("--baseline-src", type=Path,
                    help="also run `off` on another checkout's src/ (e.g. /work/main/src): what "
                         "passing the stored contexts on costs when tracing is off")
    ap.add_argument("--src", type=Path, help="the replicas' src/ (default this checkout's)")
    ap.add_argument("--in-process-events", type=int, default=2000,
                    help="events of the in-process measurement (0: skip it)")
    ap.add_argument("--in-process-rounds", type=int, default=5)
    ap.add_argument("--in-process-only", action="store_true")
    ap.add_argument("--plot-only", action="store_true", help="redraw the PNG from the JSON")
    args = ap.parse_args()
    if args.plot_only:
        saved = json.loads((RESULTS / f"{args.name}.json").read_text())
        plot(saved["runs"], saved["summary"], saved["in_process"], RESULTS / f"{args.name}.png")
        return 0
    if args.src:
        trace_overhead_wire.SRC = args.src.resolve()
    names = [n for n in args.configs.split(",") if n]
    if args.baseline_src:
        CONFIGS["baseline-off"] = {"env": {}, "context": True, "src": args.baseline_src.resolve()}
        names.append("baseline-off")
    uri = os.environ.get("MONGODB_URI")
    wire = WireServer().start() if not uri else None
    uri = uri or wire.uri  # type: ignore[union-attr]
    runs: list[dict[str, Any]] = []
    inproc: dict[str, Any] = {}
    try:
        client: MongoClient[dict[str, Any]] = MongoClient(uri)
        with tempfile.TemporaryDirectory() as d, bot_runner() as runner:
            if args.in_process_events:
                receiver = Receiver()
                try:
                    inproc = in_process(args.in_process_events, args.in_process_rounds, runner,
                                        receiver.endpoint)
                finally:
                    receiver.close()
            for r in range(0 if args.in_process_only else args.rounds):
                order = names if r % 2 == 0 else names[::-1]  # who writes its backlog first
                runs += [{**x, "round": r} for x in run_round(
                    client, uri, runner, order, args.events, args.timeout, Path(d))]
    finally:
        if wire is not None:
            wire.close()
    summ = summary(runs) if runs else {}
    write_result(args.name, {"runs": runs, "summary": summ, "in_process": inproc, "setup": {
        "server": "MONGODB_URI" if os.environ.get("MONGODB_URI") else "secantusd-py (WireServer)",
        "tenants": TENANTS, **{k: str(v) if isinstance(v, Path) else v
                               for k, v in vars(args).items()}}})
    if runs:
        plot(runs, summ, inproc, RESULTS / f"{args.name}.png")
    for n, v in {**summ, **{f"in-process {k}": v for k, v in inproc.items()}}.items():
        print(n, v)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
