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
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from pymongo import MongoClient

from board_outbox.adapters.mongo.outbox.statements import IN_STATE
from board_outbox.service.wireserver import WireServer, free_port

from .common import RESULTS, bot_runner, pyplot, stop, write_result

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"  # the replicas' code (``--src``: a snapshot, so edits meanwhile change nothing)
TENANTS = 10
CARDS = 20
CONFIGS: dict[str, dict[str, Any]] = {
    "off": {"env": {}, "context": True},
    "off-no-context": {"env": {}, "context": False},
    "100%": {"env": {"OTEL_TRACES_SAMPLER": "parentbased_always_on"}, "context": True,
             "export": True},
    "100%-no-context": {"env": {"OTEL_TRACES_SAMPLER": "parentbased_always_on"},
                        "context": False, "export": True},
    "0.01": {"env": {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                     "OTEL_TRACES_SAMPLER_ARG": "0.01"}, "context": True, "export": True,
             "ratio": 0.01},
}
GOALS = {"100%": 0.10, "0.01": 0.02}
DRAIN_SECONDS = 6.0  # past the batch span processor's 5 s schedule
IDLE_SECONDS = 10.0  # the idle rate's window: several polls, heartbeats and gauge refreshes


def traceparent(rng: random.Random, ratio: float) -> str:
    """A producer's context: a random trace, sampled as a ``TraceIdRatioBased(ratio)``
    producer would have sampled it."""
    trace_id, span_id = rng.getrandbits(128) or 1, rng.getrandbits(64) or 1
    sampled = (trace_id & TraceIdRatioBased.TRACE_ID_LIMIT) < TraceIdRatioBased.get_bound_for_rate(
        ratio)
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def prepare(client: MongoClient[dict[str, Any]], db_name: str) -> None:
    """The board before the backlog: subscriptions and cards."""
    db = client[db_name]
    tenants = [f"t{i:02d}" for i in range(TENANTS)]
    db["trigger_subscriptions"].insert_many([
        {"_id": f"{t}.s", "sub_id": f"{t}.s", "tenant_id": t, "bot": "bot", "rule": {}}
        for t in tenants])
    db["board_cards"].insert_many([
        {"_id": f"{t}/c{c}", "tenant_id": t, "card_id": f"c{c}", "title": f"card {c}",
         "column": "inbox"} for t in tenants for c in range(CARDS)])


def backlog(client: MongoClient[dict[str, Any]], db_name: str, events: int, context: bool,
            ratio: float) -> None:
    """The events, as producers write them: each tenant's seqs allocated, then the events
    inserted (the running service sees young gaps for the moment in between)."""
    db = client[db_name]
    tenants = [f"t{i:02d}" for i in range(TENANTS)]
    rng = random.Random(7)  # the same contexts in every run of a configuration
    now = time.time()
    docs, seqs = [], dict.fromkeys(tenants, 0)
    for k in range(events):
        t = tenants[k % TENANTS]
        seqs[t] += 1
        doc: dict[str, Any] = {"tenant_id": t, "seq": seqs[t], "type": "card.updated",
                               "card_id": f"c{k % CARDS}", "at": now}
        if context:
            doc["trace"] = {"traceparent": traceparent(rng, ratio), "tracestate": ""}
        docs.append(doc)
    db["board_event_counters"].insert_many([{"_id": t, "seq": s} for t, s in seqs.items()])
    for i in range(0, len(docs), 5000):
        db["board_events"].insert_many(docs[i:i + 5000])


def cpu_ns(pid: int) -> int:
    """The process's CPU so far in nanoseconds: the sum over its threads of
    ``/proc/PID/task/*/schedstat`` (``/proc/PID/stat`` counts 10 ms ticks: over the few seconds
    of an idle window that is a 30% error, and multiplied by a run's minutes it swamped the
    differences measured here). A thread that has exited drops out: the ones that matter here
    (the event loop, the driver's monitors, the span exporter) live as long as the process."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    except OSError:
        return 0
    return total


def settled(pid: int, timeout: float = 60.0) -> None:
    """Wait until a freshly spawned process has started up: its CPU still for a second."""
    deadline = time.time() + timeout
    time.sleep(1.0)
    last = cpu_ns(pid) / 1e9
    while time.time() < deadline:
        time.sleep(1.0)
        now = cpu_ns(pid) / 1e9
        if now - last < 0.03:
            return
        last = now
    raise TimeoutError("the replica never settled after start-up")


class Receiver:
    """The in-repo OTLP receiver in another process, counting the spans it gets."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tracing.otlp_receiver", "--http", str(self.port),
             "--grpc", str(free_port()), "--count-only"],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # its banner: listening

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spans(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        stop([self.proc], 10)


@dataclass
class Pipeline:
    """One configuration's ``board-outbox run`` in a round: its database, process, receiver."""

    name: str
    db: str
    proc: subprocess.Popen[bytes]
    log: Path
    receiver: Receiver | None
    c0: float = 0.0
    spans0: int = 0
    start: float = 0.0
    end: float = 0.0
    done: int = 0


def launch(client: MongoClient[dict[str, Any]], uri: str, runner: str, name: str,
           tmp: Path) -> Pipeline:
    cfg = CONFIGS[name]
    db = f"tro_{name.replace('%', 'p').replace('.', '_').replace('-', '_')}_" \
         f"{int(time.time() * 1000) % 10**8}"
    prepare(client, db)
    conf = tmp / f"{db}.toml"
    conf.write_text(
        f'[store]\nbackend = "mongo"\nuri = "{uri}"\ndatabase = "{db}"\n'
        '[service]\nreplica_name = "r0"\nlog_level = "WARNING"\nhttp_port = 0\n'
        '[tail]\nseed = "earliest"\n'
        f'[launcher]\nkind = "http"\nurl = "{runner}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"PYTHONPATH": str(cfg.get("src") or SRC), **cfg["env"]})
    receiver = Receiver() if cfg.get("export") else None
    if receiver is not None:
        env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                    "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"})
    log = tmp / f"{db}.log"
    with log.open("wb") as err:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "board_outbox", "run", "--config", str(conf)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
    return Pipeline(name, db, proc, log, receiver)


def run_round(client: MongoClient[dict[str, Any]], uri: str, runner: str, names: list[str],
              events: int, timeout: float, tmp: Path) -> list[dict[str, Any]]:
    """Every configuration at once, each its own process and database on the one server: the
    machine's load, which other jobs vary by the minute, weighs on all of them alike."""
    rows = 2 * events
    pipes = [launch(client, uri, runner, n, tmp) for n in names]
    try:
        for p in pipes:  # start-up (imports differ: the exporters) is not per event
            settled(p.proc.pid)
        for p in pipes:
            p.spans0 = p.receiver.spans() if p.receiver else 0
            p.c0, p.start = cpu_ns(p.proc.pid) / 1e9, time.time()
            backlog(client, p.db, events, CONFIGS[p.name]["context"],
                    CONFIGS[p.name].get("ratio", 1.0))
        deadline = time.time() + timeout
        waiting = list(pipes)
        while waiting and time.time() < deadline:
            time.sleep(0.5)
            for p in list(waiting):
                p.done = client[p.db]["trigger_effects"].count_documents(dict(IN_STATE["done"]))
                if p.done >= rows:
                    p.end = time.time()
                    waiting.remove(p)
        for p in waiting:
            p.end = time.time()
        # the batch exporter sends what it holds every 5 s: its last batches are this run's
        # work too, so the CPU is read once they are out, and the idle rate after that
        time.sleep(DRAIN_SECONDS)
        busy = {p.name: cpu_ns(p.proc.pid) / 1e9 - p.c0 for p in pipes}
        spans = {p.name: (p.receiver.spans() - p.spans0) if p.receiver else 0 for p in pipes}
        i0 = {p.name: cpu_ns(p.proc.pid) / 1e9 for p in pipes}
        time.sleep(IDLE_SECONDS)
        idle = {p.name: (cpu_ns(p.proc.pid) / 1e9 - i0[p.name]) / IDLE_SECONDS for p in pipes}
        idle_end = time.time() - IDLE_SECONDS
    finally:
        stop([p.proc for p in pipes], 30)
        for p in pipes:
            if p.receiver is not None:
                p.receiver.close()
    out = []
    for p in pipes:
        client.drop_database(p.db)
        own = max(0.0, busy[p.name] - idle[p.name] * (idle_end - p.start))
        r = {"config": p.name, "events": events, "finished": p.done >= rows,
             "seconds": round(p.end - p.start, 2), "cpu_s": round(busy[p.name], 3),
             "idle_cpu_fraction": round(idle[p.name], 4),
             "cpu_ms_per_event": round(own * 1000 / events, 4),
             "spans": spans[p.name], "spans_per_event": round(spans[p.name] / events, 3),
             "log_errors": p.log.read_text(errors="replace").count("ERROR")}
        print(r, flush=True)
        out.append(r)
    return out


# --- in process: the same pipeline on the memory twins, no server to vary its pace -----------------

# name -> (the sampler, or None: no SDK; whether the events carry a context)
IN_PROCESS: dict[str, tuple[str | None, bool]] = {
    "off": (None, True), "off-no-context": (None, False),
    "100%": ("parentbased_always_on", True), "100%-no-context": ("parentbased_always_on", False),
    "0.01": ("parentbased_traceidratio", True)}


async def in_process_once(name: str, events: int, runner: str, endpoint: str) -> float:
    """One replica's ``Service`` on the memory twins, driven by its own passes (``drain_pass``,
    ``work_pass``: the loops' bodies) until every row is done, HTTP launches to the runner and
    spans over OTLP/HTTP to the receiver as ``run`` exports them; this process's CPU (every
    thread: the exporter's too) per event."""
    import gc

    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from board_outbox.adapters.launchers import HttpLauncher
    from board_outbox.adapters.memory import open_stores
    from board_outbox.model.board import Card
    from board_outbox.model.subscriptions import MatchRule, Subscription
    from board_outbox.service.config import load_config
    from board_outbox.service.runtime import Service
    from board_outbox.service.telemetry import sampler

    tp: trace.TracerProvider = trace.NoOpTracerProvider()
    sdk: TracerProvider | None = None
    chosen, context = IN_PROCESS[name]
    if chosen is not None:
        env = {"OTEL_TRACES_SAMPLER": chosen, "OTEL_TRACES_SAMPLER_ARG": "0.01"}
        sdk = TracerProvider(resource=Resource.create({"service.name": "board-outbox"}),
                             sampler=sampler(env))
        sdk.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(f"{endpoint}/v1/traces")))
        tp = sdk
    launcher = HttpLauncher(runner, tracer_provider=tp)
    ratio = 0.01 if name == "0.01" else 1.0
    async with open_stores(launcher=launcher) as stores:
        svc = Service(stores, load_config(env={}, tail={"seed": "earliest",
                                                        "change_streams": False}),
                      tracer_provider=tp)
        tenants = [f"t{i:02d}" for i in range(TENANTS)]
        for t in tenants:
            await stores.subs.put(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="bot",
                                               rule=MatchRule()))
            for c in range(CARDS):
                await stores.cards.put(Card(tenant_id=t, card_id=f"c{c}", title=f"card {c}"))
        rng = random.Random(7)
        for k in range(events):
            t = tenants[k % TENANTS]
            doc = {"tenant_id": t, "seq": await stores.events.allocate_seq(t),
                   "type": "card.updated", "card_id": f"c{k % CARDS}", "at": time.time()}
            if context:
                doc["trace"] = {"traceparent": traceparent(rng, ratio), "tracestate": ""}
            await stores.events.insert(doc)
        gc.collect()
        gc.freeze()  # as ``Service.run`` does at start
        c0 = time.process_time()
        done = 0
        while done < 2 * events:
            await svc.drain_pass(full=True)
            res = await svc.work_pass()
            done += 0 if res is None else res.done
        if sdk is not None:
            sdk.force_flush()
        cpu = time.process_time() - c0
        gc.unfreeze()
        await launcher.aclose()
    if sdk is not None:
        sdk.shutdown()
    return cpu * 1e6 / events


def in_process(events: int, rounds: int, runner: str, endpoint: str) -> dict[str, Any]:
    import anyio

    got: dict[str, list[float]] = {n: [] for n in IN_PROCESS}
    for r in range(rounds):
        for n in (IN_PROCESS if r % 2 == 0 else list(IN_PROCESS)[::-1]):
            got[n].append(anyio.run(in_process_once, n, events, runner, endpoint))
            print("in-process", n, round(got[n][-1], 1), "us/event", flush=True)
    med = {n: statistics.median(v) for n, v in got.items()}
    out: dict[str, Any] = {
        n: {"cpu_us_per_event_median": round(med[n], 1), "runs": [round(x, 1) for x in v],
            "tracing_us_per_event": round(med[n] - med["off"], 1),
            "overhead_vs_off": round(med[n] / med["off"] - 1.0, 4)}
        for n, v in got.items()}
    # what the span per event costs (100% with contexts against without), and what reading and
    # passing on the contexts costs with tracing off
    out["materialize_span_us_per_event"] = round(med["100%"] - med["100%-no-context"], 1)
    out["context_us_per_event_off"] = round(med["off"] - med["off-no-context"], 1)
    return out


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    by = {n: [r["cpu_ms_per_event"] for r in runs if r["config"] == n] for n in CONFIGS}
    med = {n: statistics.median(v) for n, v in by.items() if v}
    base = med.get("off")
    out: dict[str, Any] = {}
    for n, m in med.items():
        ratio = None if not base else m / base - 1.0
        out[n] = {"cpu_ms_per_event_median": round(m, 4), "runs": by[n],
                  "overhead_vs_off": None if ratio is None else round(ratio, 4),
                  "goal": GOALS.get(n), "spans_per_event": statistics.median(
                      [r["spans_per_event"] for r in runs if r["config"] == n])}
        # the same ratio round by round (each round's configurations ran side by side)
        paired = [r["cpu_ms_per_event"] / o["cpu_ms_per_event"] - 1.0
                  for r in runs if r["config"] == n for o in runs
                  if o["config"] == "off" and o.get("round") == r.get("round")]
        if paired:
            out[n]["overhead_vs_off_by_round"] = [round(x, 4) for x in paired]
            ratio = statistics.median(paired)
            out[n]["overhead_vs_off_paired_median"] = round(ratio, 4)
        if n in GOALS and ratio is not None:
            out[n]["met"] = ratio <= GOALS[n]
    if "100%" in med and "100%-no-context" in med:
        out["materialize_span_us_per_event"] = round(
            (med["100%"] - med["100%-no-context"]) * 1000, 1)
    if "off" in med and "baseline-off" in med:
        out["off_vs_baseline"] = round(med["off"] / med["baseline-off"] - 1.0, 4)
    if "off" in med and "off-no-context" in med:
        out["context_parse_us_per_event_off"] = round((med["off"] - med["off-no-context"]) * 1000, 1)
    return out


COLORS = {"off": "#8c8c8c", "off-no-context": "#bbbbbb", "100%": "#4c72b0",
          "100%-no-context": "#7fa3d1", "0.01": "#55a868", "baseline-off": "#cccccc"}


def plot(runs: list[dict[str, Any]], summ: dict[str, Any], inproc: dict[str, Any],
         path: Path) -> None:
    plt = pyplot()
    names = [n for n in CONFIGS if n in summ]
    panels = 3 if inproc else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4.2))
    meds = [summ[n]["cpu_ms_per_event_median"] for n in names]
    axes[0].bar(names, meds, color=[COLORS[n] for n in names])
    for i, n in enumerate(names):
        xs = [r["cpu_ms_per_event"] for r in runs if r["config"] == n]
        axes[0].scatter([i] * len(xs), xs, color="black", s=8, zorder=3)
        ov = summ[n].get("overhead_vs_off_paired_median")
        if ov is not None and n != "off":
            axes[0].text(i, max(xs), f"{ov:+.1%}\n(paired)", ha="center", va="bottom", fontsize=8)
    axes[0].set_ylim(0, 1.3 * max(r["cpu_ms_per_event"] for r in runs))
    axes[0].set_ylabel("whole-process CPU ms per event")
    axes[0].set_title("on the wire: board-outbox run, median\n(dots: rounds, each run side by "
                      "side)", fontsize=9)
    if inproc:
        ins = [n for n in IN_PROCESS if n in inproc]
        axes[1].bar(ins, [inproc[n]["cpu_us_per_event_median"] for n in ins],
                    color=[COLORS[n] for n in ins])
        for i, n in enumerate(ins):
            if n != "off":
                axes[1].text(i, inproc[n]["cpu_us_per_event_median"],
                             f"{inproc[n]['tracing_us_per_event']:+.0f} µs", ha="center",
                             va="bottom", fontsize=8)
        axes[1].set_ylim(0, 1.2 * max(inproc[n]["cpu_us_per_event_median"] for n in ins))
        axes[1].set_ylabel("CPU µs per event")
        axes[1].set_title("in process, memory twins (no server): the\ntracing cost per event, "
                          "median of rounds", fontsize=9)
    axes[-1].bar(names, [summ[n]["spans_per_event"] for n in names],
                 color=[COLORS[n] for n in names])
    axes[-1].set_title("spans exported per event (wire)", fontsize=9)
    for ax in axes:
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("tracing overhead, one run, SecantusDB wire server (a launch and a projection "
                 "row per event, OTLP/HTTP export to the in-repo receiver)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1000, help="per pipeline")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--configs", default="off,100%,0.01",
                    help=f"of {', '.join(CONFIGS)} (a round runs them side by side: more than "
                         "three or four saturate a single-threaded wire server)")
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
    global SRC
    SRC = args.src.resolve() if args.src else SRC
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
