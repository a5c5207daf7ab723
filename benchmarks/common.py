"""Shared pieces of the benchmarks: backends, synthetic workloads, timing, result files."""

from __future__ import annotations

import gc
import importlib.abc
import importlib.machinery
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
from pymongo import monitoring

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import LaunchRequest, Stores

RESULTS = Path(__file__).parent / "results"


def machine_info() -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for pkg in ("board-outbox", "pymongo", "anyio", "msgspec", "opentelemetry-sdk"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "processor": _cpu_model(),
        "versions": versions,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display): every benchmark's plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def settle_heap() -> None:
    """Freeze the setup's objects out of the cyclic GC, as ``Service.run`` does at start, so a
    measurement does not pay for re-walking the benchmark's own fixture heap."""
    gc.collect()
    gc.unfreeze()
    gc.freeze()


def write_result(name: str, doc: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine_info(), **doc}, indent=2) + "\n")
    return path


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    v = sorted(values)
    q = statistics.quantiles(v, n=100, method="inclusive") if len(v) > 1 else [v[0]] * 99
    return {"n": len(v), "p50": q[49], "p95": q[94], "p99": q[98], "max": v[-1], "mean": statistics.fmean(v)}


# --- backends ---------------------------------------------------------------------------------


@dataclass
class Backend:
    name: str
    stores: Stores
    memory: MemoryBackend | None = None

    async def insert_events(self, docs: list[dict[str, Any]]) -> None:
        """Bulk-load pre-allocated events (benchmark setup, not measured)."""
        if self.memory is not None:
            for d in docs:
                self.memory.events.insert_now(d)
            return
        if not docs:
            return
        events = self.stores.events
        db = events.events.database  # type: ignore[attr-defined]
        await db["board_events"].insert_many(docs, ordered=False)
        counters: dict[str, int] = {}
        for d in docs:
            counters[d["tenant_id"]] = max(counters.get(d["tenant_id"], 0), d["seq"])
        for t, seq in counters.items():
            await db["board_event_counters"].update_one({"_id": t}, {"$max": {"seq": seq}}, upsert=True)


def mongo_uri() -> str | None:
    return os.environ.get("MONGODB_URI")


@asynccontextmanager
async def backends(with_mongo: bool) -> AsyncIterator[list[str]]:
    """Names of the backends to measure: memory always; mongo when a replica set is reachable."""
    names = ["memory"]
    if with_mongo:
        names.append("mongo")
    yield names


@asynccontextmanager
async def open_backend(name: str, uri: str | None = None,
                       listeners: list[Any] | None = None) -> AsyncIterator[Backend]:
    if name == "memory":
        b = MemoryBackend()
        yield Backend("memory", b.stores(), b)
        return
    import uuid

    from pymongo import AsyncMongoClient

    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo import ensure_schema, mongo_stores

    assert uri is not None
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        uri, tz_aware=True, event_listeners=listeners or [])
    dbname = f"board_outbox_bench_{uuid.uuid4().hex[:8]}"
    db = client[dbname]
    await ensure_schema(db)
    try:
        yield Backend("mongo", mongo_stores(db, MemoryLauncher()))
    finally:
        await client.drop_database(dbname)
        await client.close()


# --- workload ---------------------------------------------------------------------------------


async def synthetic_board(
    backend: Backend, *, tenants: int, subs_per_tenant: int, events: int, cards_per_tenant: int = 200,
    seed: int = 1, at: float | None = None,
) -> list[str]:
    """Tenants with ``subs_per_tenant`` subscriptions (sub i wants column col<i>), cards spread
    over those columns, and ``events`` events round-robin over tenants. Each event matches
    exactly one subscription, whatever the subscription count: the count costs matching work."""
    rng = random.Random(seed)
    names = [f"t{i:03d}" for i in range(tenants)]
    for t in names:
        for i in range(subs_per_tenant):
            await backend.stores.subs.put(Subscription(
                sub_id=f"{t}.s{i}", tenant_id=t, bot=f"bot{i}", rule=MatchRule(column=f"col{i}")))
        for c in range(cards_per_tenant):
            await backend.stores.cards.put(Card(tenant_id=t, card_id=f"c{c}",
                                                column=f"col{rng.randrange(subs_per_tenant)}"))
    now = time.time() if at is None else at
    docs = []
    seqs = dict.fromkeys(names, 0)
    for n in range(events):
        t = names[n % tenants]
        seqs[t] += 1
        docs.append({"tenant_id": t, "seq": seqs[t], "type": "card.updated",
                     "card_id": f"c{rng.randrange(cards_per_tenant)}", "at": now})
    await backend.insert_events(docs)
    return names


# --- a local bot runner and the sniffio-less state (launcher.py, costs.py) ---------------------

# A bot runner in another process on 127.0.0.1: answers every POST with a launch id.
RUNNER = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b'{"launch_id": "L"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
ThreadingHTTPServer.request_queue_size = 256
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
s.daemon_threads = True
print(s.server_address[1], flush=True)
s.serve_forever()
"""


@contextmanager
def bot_runner(script: str = RUNNER) -> Iterator[str]:
    """Start the runner (``script``: another runner's source, printing its port first); yield
    its launch URL; stop it."""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield f"http://127.0.0.1:{int(proc.stdout.readline())}/launch"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class CountingRunner:
    """An in-process bot runner (a ``Launcher``) whose launches take ``seconds`` each; it records
    the most launches of one bot in flight at once, and how often each row was launched: the
    runner's own check of a concurrency limit (F2)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.launched: Counter[str] = Counter()  # row key -> launches

    async def launch(self, req: LaunchRequest) -> str:
        self.now[req.bot] += 1
        self.most[req.bot] = max(self.most[req.bot], self.now[req.bot])
        try:
            await anyio.sleep(self.seconds)
        finally:
            self.now[req.bot] -= 1
        self.launched[req.row_key] += 1
        return f"run-{req.row_key}"


class NoSniffio(importlib.abc.MetaPathFinder):
    """``import sniffio`` fails after the same search of sys.path a missing module costs."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None,
                  ) -> importlib.machinery.ModuleSpec | None:
        if name != "sniffio":
            return None
        importlib.machinery.PathFinder.find_spec("_board_outbox_no_such_module", None)
        raise ModuleNotFoundError("No module named 'sniffio'", name=name)


@contextmanager
def sniffio_absent() -> Any:
    saved = sys.modules.pop("sniffio", None)
    finder = NoSniffio()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        if saved is not None:
            sys.modules["sniffio"] = saved


IGNORED = {"hello", "ismaster", "isMaster", "ping", "endSessions", "buildInfo", "saslStart",
           "saslContinue"}


class CommandCounter(monitoring.CommandListener):
    """The commands a client sends, counted by name (pymongo's command monitoring), handshakes
    and pings left out: what a benchmark divides by its work."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def reset(self) -> None:
        self.counts.clear()

    @property
    def by_name(self) -> dict[str, int]:
        return dict(self.counts)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in IGNORED:
            self.counts[event.command_name] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


class CommandCount(monitoring.CommandListener):
    """Every command a client sends (``n``), counted by pymongo's command monitoring: the
    client-side count a benchmark subtracts from the server's counters or divides by its work."""

    def __init__(self) -> None:
        self.n = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.n += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def one_bot_backlog(stores: Stores, tenant: str, bot: str, rows: int, at: float) -> None:
    """One subscription of ``bot`` and ``rows`` events that each match it (a card each): a
    backlog of launches of one bot, for the limits' benchmark and goal test."""
    await stores.subs.put(Subscription(sub_id="s", tenant_id=tenant, bot=bot))
    for i in range(rows):
        await stores.cards.put(Card(tenant_id=tenant, card_id=f"c{i}"))
        seq = await stores.events.allocate_seq(tenant)
        await stores.events.insert({"tenant_id": tenant, "seq": seq,
                                    "type": "card.created", "card_id": f"c{i}", "at": at})


TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """A process's CPU so far (utime + stime from /proc); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def server_requests(client: Any, counter: CommandCount) -> int:
    """The server's request counter, minus this script's own requests so far (this read
    included): ``client`` sends its commands through ``counter``."""
    n = int(client.admin.command("serverStatus")["network"]["numRequests"])
    return n - counter.n


def stop(procs: Sequence[subprocess.Popen[Any]], timeout: float) -> None:
    """SIGTERM every process still running, then wait for each; kill the ones that outlast
    ``timeout``."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
