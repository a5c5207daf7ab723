"""What ``shortpath.py`` runs and how it starts it: the cases, the pipelines (the floor,
``board-outbox run`` at N processes, inserts alone), this script's own client (the seeded board,
the events it sends, its commands counted), and spawning a pipeline until its members show.
Separate from the measured run and the command line that drive them."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from board_outbox.adapters.mongo.outbox.statements import IN_STATE
from board_outbox.service.wireserver import free_port

from .common import CommandCount, server_requests, stop
from .runner import RunnerClient
from .throughput import Server

ROOT = Path(__file__).resolve().parent.parent
CARDS = 20


@dataclass(frozen=True)
class Case:
    name: str
    events: int
    rate: float  # events per second; 0: all in one insert_many (a backlog)
    tenants: int


@dataclass(frozen=True)
class Pipeline:
    label: str
    kind: str  # "floor", "run" (board-outbox run) or "inserts" (no consumer)
    replicas: int = 1
    src: Path | None = None


@dataclass(frozen=True)
class Sent:
    tenant: str
    seq: int
    at: float  # the insert was sent
    acked: float  # its reply came back


class Store:
    """This script's own client, its commands counted (subtracted from the server's)."""

    def __init__(self, uri: str) -> None:
        self.counter = CommandCount()
        self.client: MongoClient[dict[str, Any]] = MongoClient(uri, event_listeners=[self.counter])

    def requests(self) -> int:
        return server_requests(self.client, self.counter)

    def getmores(self) -> int:
        return int(self.client.admin.command("serverStatus")["opcounters"]["getmore"])

    def seed(self, db: str, tenants: int) -> list[str]:
        names = [f"t{i:02d}" for i in range(tenants)]
        d = self.client[db]
        d["trigger_subscriptions"].insert_many([
            {"_id": f"{t}.s", "sub_id": f"{t}.s", "tenant_id": t, "bot": "bot", "rule": {}}
            for t in names])
        d["board_cards"].insert_many([
            {"_id": f"{t}/c{c}", "tenant_id": t, "card_id": f"c{c}", "title": f"card {c}",
             "column": "inbox"} for t in names for c in range(CARDS)])
        return names

    def emit(self, db: str, tenant: str, k: int) -> Sent:
        d = self.client[db]
        counter = d["board_event_counters"].find_one_and_update(
            {"_id": tenant}, {"$inc": {"seq": 1}}, upsert=True, return_document=True)
        assert counter is not None  # upserted and returned after the update
        seq = int(counter["seq"])
        at = time.time()
        d["board_events"].insert_one({"tenant_id": tenant, "seq": seq, "type": "card.updated",
                                      "card_id": f"c{k % CARDS}", "at": at})
        return Sent(tenant, seq, at, time.time())

    def backlog(self, db: str, names: list[str], events: int) -> list[Sent]:
        d = self.client[db]
        per = Counter(names[k % len(names)] for k in range(events))
        for t, n in per.items():
            d["board_event_counters"].update_one({"_id": t}, {"$inc": {"seq": n}}, upsert=True)
        seqs = dict.fromkeys(names, 0)
        at = time.time()
        docs: list[dict[str, Any]] = []
        for k in range(events):
            t = names[k % len(names)]
            seqs[t] += 1
            docs.append({"tenant_id": t, "seq": seqs[t], "type": "card.updated",
                         "card_id": f"c{k % CARDS}", "at": at})
        d["board_events"].insert_many(docs, ordered=False)
        acked = time.time()
        return [Sent(str(doc["tenant_id"]), int(doc["seq"]), at, acked) for doc in docs]

    def done(self, db: str, kind: str) -> int:
        """Done rows over an index of each schema (see ``throughput.Store.done``)."""
        flt: dict[str, Any] = {"state": "done"} if kind == "floor" else dict(IN_STATE["done"])
        return self.client[db]["trigger_effects"].count_documents(flt)

    def live_members(self, db: str) -> int:
        return self.client[db]["board_outbox_members"].count_documents(
            {"expires_at": {"$gt": time.time()}})


@dataclass
class Ctx:
    store: Store
    server: Server
    runner: RunnerClient
    tmp: Path
    args: argparse.Namespace
    py_spy: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Spawned:
    procs: list[subprocess.Popen[Any]]
    logs: list[Path]
    statements: list[Path]


def _pythonpath(src: Path) -> str:
    projections = src.parent / "projections"
    return f"{src}:{projections}" if projections.is_dir() else str(src)


def spawn(ctx: Ctx, pipe: Pipeline, db: str, statements: bool) -> Spawned:
    uri, tmp = ctx.server.uri, ctx.tmp
    stmt = [tmp / f"{db}-{i}.statements" for i in range(pipe.replicas)] if statements else []
    if pipe.kind == "inserts":
        return Spawned([], [], [])
    if pipe.kind == "floor":
        args = ["--follow", uri, db, ctx.runner.launch_url] + \
            (["--projection"] if ctx.args.projection else [])
        env = dict(os.environ)
        if statements:
            env["BENCH_STATEMENT_LOG"] = str(stmt[0])
            cmd = [sys.executable, "-m", "benchmarks.statement_log", "--floor", *args]
        else:
            cmd = [sys.executable, "-m", "benchmarks.floor", *args]
        log = tmp / f"{db}-floor.log"
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=open(log, "wb"), text=True)  # noqa: SIM115
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            proc.wait(timeout=10)
            raise RuntimeError(f"the floor did not start: {log.read_text()[-2000:]}")
        return Spawned([proc], [log], stmt)
    procs, logs = [], []
    for i in range(pipe.replicas):
        cfg = tmp / f"{db}-r{i}.toml"
        projections = '["board-reflect"]' if ctx.args.projection else "[]"
        cfg.write_text(
            f"projections = {projections}\n"
            f'[store]\nbackend = "mongo"\nuri = "{uri}"\ndatabase = "{db}"\n'
            f'[service]\nreplica_name = "r{i}"\n'
            f'http_port = {0 if ctx.args.no_ops_port else free_port()}\n'
            '[tail]\nseed = "earliest"\n'
            f'[launcher]\nkind = "http"\nurl = "{ctx.runner.launch_url}"\n')
        env = {**os.environ, "PYTHONPATH": _pythonpath(pipe.src or ROOT / "src"),
               "OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "otlp",
               "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_EXPORTER_OTLP_ENDPOINT": ctx.runner.base}
        module = "board_outbox"
        if statements:
            module, env["BENCH_STATEMENT_LOG"] = "benchmarks.statement_log", str(stmt[i])
        logs.append(tmp / f"{db}-r{i}.log")
        procs.append(subprocess.Popen([sys.executable, "-m", module, "run", "--config", str(cfg)],
                                      cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                      stderr=open(logs[-1], "wb")))  # noqa: SIM115
    deadline = time.time() + 60
    while ctx.store.live_members(db) < pipe.replicas:
        if any(p.poll() is not None for p in procs):
            stop(procs, 10)
            raise RuntimeError(f"a replica exited: {logs[0].read_text()[-2000:]}")
        if time.time() > deadline:  # a checkout without membership: give it time to start
            ctx.notes.append(f"{pipe.label}: {pipe.replicas} members never showed; started anyway")
            break
        time.sleep(0.25)
    return Spawned(procs, logs, stmt)
