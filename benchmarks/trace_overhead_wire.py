"""The wire round of ``trace_overhead.py``: the configurations, the board and backlog each
pipeline drains, the OTLP receiver in its own process, and one round that runs every
configuration's ``board-outbox run`` side by side and reads each process's CPU per event from
/proc. Separate from the in-process reading, the summary and the figure."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from pymongo import MongoClient

from board_outbox.adapters.mongo.outbox.statements import IN_STATE
from board_outbox.service.wireserver import free_port

from .common import stop

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
