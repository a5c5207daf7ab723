"""Our CPU per event on the production path, next to the bare-driver floor measured in the same
run (SPEC W4; issue 22, item 5).

CPU is this process's CPU time (``time.process_time``: our code plus pymongo's encoding and
decoding); the store and the bot runner are other processes, so their CPU is excluded by
construction. Store commands are the server's own counters (``serverStatus`` ``opcounters``):
command monitoring on our client would cost CPU the floor's bare client does not pay (for a
bulk write it builds the whole command again for the listener).

The production path:
- telemetry ON: an SDK ``TracerProvider`` with a ``BatchSpanProcessor`` and an SDK
  ``MeterProvider`` with a ``PeriodicExportingMetricReader``, as ``service/telemetry.py`` sets
  them up, exporting to in-process exporters that drop what they get;
- materialize: ``Tail.drain_all`` with one launch subscription per tenant (every event matches)
  and the default projection (``board-reflect``): two rows per event;
- execute: ``EffectWorker.tick_any`` (the cross-tenant claim the service runs), default
  ``WorkerSettings``, ``Metrics`` on, launches over HTTP (``HttpLauncher``) to a local bot runner
  (a separate process on 127.0.0.1, answering 200 at once). Launch rows and projection rows are
  executed on two boards of their own, so each kind's CPU per row is its own.

The floor, same run, same server, a bare ``AsyncMongoClient`` (no listeners, nothing of ours):
- ``find_one``: one ``find_one({"_id": ...})`` -- the unit the goals are stated in;
- ``materialize``: the command mix the tail sends per batch (read the events after the cursor,
  the batch's cards in one ``$in``, one unordered bulk of ``$setOnInsert`` upserts of the very
  row documents the tail wrote, the cursor CAS), on a fresh database with the same events and
  cards: what a driver loop with the documents already in hand costs.

Components in the same run, per row: one HTTP launch (``HttpLauncher`` alone), ``Metrics`` per
done row, and the tail's row building (match + rows + span event) per row.

    .venv/bin/python -m benchmarks.costs [--events 1000] [--baseline REV]

``--baseline REV`` measures the same workload with the source of git revision ``REV`` in a child
process against the same server, right after this one ("before" vs "after").
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from pymongo import AsyncMongoClient, UpdateOne

from board_outbox.adapters.launchers import HttpLauncher
from board_outbox.adapters.mongo import ensure_schema, mongo_stores
from board_outbox.engine.tail.tail import Tail, TailSettings
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.engine.work.worker import EffectWorker, WorkerSettings
from board_outbox.model.board import Card
from board_outbox.model.clock import SystemClock
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import LaunchRequest, Stores
from board_outbox.service.runtime import build_registry

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PROJECTION = "board-reflect"
CARDS = 200



# --- telemetry on, exporting nowhere -------------------------------------------------------------


class NullSpanExporter(SpanExporter):
    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


class NullMetricExporter(MetricExporter):
    def __init__(self) -> None:
        super().__init__(preferred_temporality={}, preferred_aggregation={})

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


_ = AggregationTemporality  # the exporter keeps the SDK's default temporality


def telemetry_on() -> tuple[TracerProvider, MeterProvider, NullSpanExporter]:
    resource = Resource.create({"service.name": "board-outbox"})
    spans = NullSpanExporter()
    tp = TracerProvider(resource=resource)
    tp.add_span_processor(BatchSpanProcessor(spans))
    mp = MeterProvider(resource=resource, metric_readers=[
        PeriodicExportingMetricReader(NullMetricExporter(), export_interval_millis=1000)])
    return tp, mp, spans


# --- measuring -----------------------------------------------------------------------------------


OPS = ("query", "getmore", "insert", "update", "delete")


async def server_ops(client: AsyncMongoClient[dict[str, Any]]) -> Counter[str]:
    """The server's operation counters by kind, and ``requests``: every request it received
    (one per command). Driver heartbeats (``hello``, every 10 s per client) land in
    ``requests`` too."""
    status = await client.admin.command("serverStatus")
    out = Counter({k: int(status.get("opcounters", {}).get(k, 0)) for k in OPS})
    out["requests"] = int(status.get("network", {}).get("numRequests", 0))
    return out


async def server_ops_since(client: AsyncMongoClient[dict[str, Any]], before: Counter[str],
                           ) -> Counter[str]:
    ops = await server_ops(client)
    ops.subtract(before)
    ops["requests"] -= 1  # this read itself
    return ops


def settle() -> None:
    """Setup objects out of the cyclic GC, as ``Service.run`` does at start."""
    gc.collect()
    gc.unfreeze()
    gc.freeze()


async def cpu_of(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    """(CPU seconds of this process while ``fn`` ran, its result)"""
    settle()
    c0 = time.process_time()
    out = await fn()
    return time.process_time() - c0, out


# --- boards --------------------------------------------------------------------------------------


def event_docs(tenants: list[str], events: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    seqs = dict.fromkeys(tenants, 0)
    now = time.time()
    docs = []
    for n in range(events):
        t = tenants[n % len(tenants)]
        seqs[t] += 1
        docs.append({"tenant_id": t, "seq": seqs[t], "type": "card.updated",
                     "card_id": f"c{rng.randrange(CARDS)}", "at": now})
    return docs


async def load_board(db: Any, stores: Stores, tenants: list[str], events: list[dict[str, Any]],
                     subs: bool) -> None:
    for t in tenants:
        if subs:
            await stores.subs.put(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="bot",
                                               rule=MatchRule()))
        for c in range(CARDS):
            await stores.cards.put(Card(tenant_id=t, card_id=f"c{c}", title=f"card {c}",
                                        column="todo", labels=("x",)))
    await db["board_events"].insert_many([dict(d) for d in events], ordered=False)
    heads: dict[str, int] = {}
    for d in events:
        heads[d["tenant_id"]] = max(heads.get(d["tenant_id"], 0), d["seq"])
    for t, seq in heads.items():
        await db["board_event_counters"].update_one({"_id": t}, {"$max": {"seq": seq}}, upsert=True)


class Run:
    """One measured run: a client with command monitoring, a database per board."""

    def __init__(self, uri: str, tenants: int, events: int, batch: int, log: Any) -> None:
        self.uri, self.batch, self.log = uri, batch, log
        self.tenants = [f"t{i:02d}" for i in range(tenants)]
        self.events = events
        self.client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, tz_aware=True)
        self.bare: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, tz_aware=True)
        self.dbs: list[str] = []
        self.tp, self.mp, self.spans = telemetry_on()

    def db(self, name: str, bare: bool = False) -> Any:
        full = f"bo_costs_{os.getpid()}_{name}_{len(self.dbs)}"
        self.dbs.append(full)
        return (self.bare if bare else self.client)[full]

    async def close(self) -> None:
        for name in set(self.dbs):
            await self.client.drop_database(name)
        await self.client.close()
        await self.bare.close()
        self.tp.shutdown()
        self.mp.shutdown()

    def tail(self, stores: Stores, projections: Sequence[str]) -> Tail:
        return Tail(events=stores.events, cursors=stores.cursors, outbox=stores.outbox,
                    subs=stores.subs, cards=stores.cards, clock=SystemClock(),
                    settings=TailSettings(batch_size=self.batch, seed="earliest",
                                          batch_seconds=3600),  # the fixed batch is measured
                    projections=projections, tracer_provider=self.tp)

    async def drain(self, tail: Tail) -> tuple[int, int]:
        events = rows = 0
        while True:
            results = await tail.drain_all(self.tenants)
            got = sum(r.materialized for r in results)
            events += got
            rows += sum(r.rows for r in results)
            if got == 0:
                return events, rows

    # --- the floor ---

    async def floor_find_one(self, n: int = 1000) -> float:
        coll = self.db("floor", bare=True)["one"]
        await coll.insert_one({"_id": "k", "v": 1})
        for _ in range(100):
            await coll.find_one({"_id": "k"})

        async def loop() -> None:
            for _ in range(n):
                await coll.find_one({"_id": "k"})

        cpu, _ = await cpu_of(loop)
        return cpu * 1e6 / n

    async def floor_materialize(self, events: list[dict[str, Any]],
                                rows: list[dict[str, Any]]) -> float:
        """The tail's command mix per batch from a bare driver with the documents in hand."""
        db = self.db("floor_mat", bare=True)
        await ensure_schema(db)
        stores = mongo_stores(db, HttpLauncher("http://127.0.0.1:9/"))
        await load_board(db, stores, self.tenants, events, subs=True)
        ev, cards, out, cursors = (db["board_events"], db["board_cards"], db["trigger_effects"],
                                   db["trigger_cursors"])
        by_tenant: dict[str, list[dict[str, Any]]] = {t: [] for t in self.tenants}
        for r in rows:
            by_tenant[r["tenant_id"]].append({k: v for k, v in r.items() if k != "_id"})
        for t in self.tenants:
            await cursors.update_one({"_id": t}, {"$setOnInsert": {"seq": 0}}, upsert=True)
        fields = {"_id": 0, "tenant_id": 1, "seq": 1, "type": 1, "card_id": 1, "at": 1, "actor": 1}

        async def loop() -> int:
            n = 0
            for t in self.tenants:
                mine = sorted(by_tenant[t], key=lambda r: r["seq"])
                await db["trigger_subscriptions"].find({"tenant_id": t}).to_list(None)
                cursor = 0
                while True:
                    got = await (ev.find({"tenant_id": t, "seq": {"$gt": cursor}}, fields)
                                 .sort("seq", 1).limit(self.batch).batch_size(self.batch)
                                 .to_list(None))
                    if not got:
                        break
                    last = got[-1]["seq"]
                    ids = list({f"{t}/{d['card_id']}" for d in got})
                    await (cards.find({"_id": {"$in": ids}}, {"consumed": 0}).limit(len(ids))
                           .batch_size(len(ids)).to_list(None))
                    batch = [r for r in mine if cursor < r["seq"] <= last]
                    await out.bulk_write([UpdateOne({"row_key": r["row_key"]}, {"$setOnInsert": r},
                                                    upsert=True) for r in batch], ordered=False)
                    await cursors.update_one({"_id": t, "seq": cursor}, {"$set": {"seq": last}})
                    cursor = last
                    n += len(got)
            return n

        cpu, n = await cpu_of(loop)
        return cpu * 1e6 / max(1, int(n))

    # --- ours ---

    async def materialize(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        db = self.db("mat")
        await ensure_schema(db)
        stores = mongo_stores(db, HttpLauncher("http://127.0.0.1:9/"))
        await load_board(db, stores, self.tenants, events, subs=True)
        tail = self.tail(stores, [PROJECTION])
        for t in self.tenants:
            await tail.cursor(t)
        ops0 = await server_ops(self.client)
        cpu, (n_events, n_rows) = await cpu_of(lambda: self.drain(tail))
        ops = await server_ops_since(self.client, ops0)
        written = await db["trigger_effects"].find({}).to_list(None)
        return {"events": n_events, "rows": n_rows, "cpu_us_per_event": cpu * 1e6 / max(1, n_events),
                "cpu_us_per_row": cpu * 1e6 / max(1, n_rows),
                "server_ops": dict(ops), "commands_per_event": ops["requests"] / max(1, n_events),
                "row_doc_bytes": _bson_size(written[0]) if written else 0,
                "_rows": written}

    async def execute(self, kind: str, events: list[dict[str, Any]], url: str) -> dict[str, Any]:
        db = self.db(f"exec_{kind}")
        await ensure_schema(db)
        launcher = HttpLauncher(url)
        stores = mongo_stores(db, launcher)
        await load_board(db, stores, self.tenants, events, subs=kind == "launch")
        projections = [PROJECTION] if kind == "projection" else []
        tail = self.tail(stores, projections)
        for t in self.tenants:
            await tail.cursor(t)
        _, (_, rows) = await cpu_of(lambda: self.drain(tail))
        metrics = Metrics(self.mp.get_meter("board_outbox"))
        worker = EffectWorker(outbox=stores.outbox, registry=build_registry(stores, projections),
                              clock=SystemClock(), settings=WorkerSettings(),
                              rng=random.Random(1), metrics=metrics, tracer_provider=self.tp)
        ops0 = await server_ops(self.client)

        async def loop() -> tuple[int, int]:
            done = ticks = 0
            while done < rows and ticks < 10 * rows + 100:
                res = await worker.tick_any()
                done += res.done
                ticks += 1
            return done, ticks

        cpu, (done, ticks) = await cpu_of(loop)
        ops = await server_ops_since(self.client, ops0)
        await launcher.aclose()
        return {"rows": done, "ticks": ticks, "cpu_us_per_row": cpu * 1e6 / max(1, done),
                "server_ops": dict(ops), "commands_per_row": ops["requests"] / max(1, done)}

    # --- components, alone ---

    async def launch_alone(self, url: str, n: int = 500) -> float:
        launcher = HttpLauncher(url)
        reqs = [LaunchRequest(tenant_id="t", bot="b", card_id="c", sub_id="s", seq=i,
                              row_key=f"t/{i}/sub/s") for i in range(n + 50)]
        for r in reqs[:50]:
            await launcher.launch(r)

        async def loop() -> None:
            for r in reqs[50:]:
                await launcher.launch(r)

        cpu, _ = await cpu_of(loop)
        await launcher.aclose()
        return cpu * 1e6 / n

    def metrics_alone(self, rows: list[dict[str, Any]]) -> float:
        from board_outbox.model.codec import from_doc
        from board_outbox.model.errors import MalformedRow
        from board_outbox.model.rows import EffectRow

        decoded = [from_doc(r, EffectRow, MalformedRow) for r in rows]
        metrics = Metrics(self.mp.get_meter("board_outbox_alone"))
        batch = WorkerSettings().batch_size
        many = getattr(metrics, "rows_done", None)
        settle()
        c0 = time.process_time()
        for i in range(0, len(decoded), batch):
            chunk, now = decoded[i:i + batch], time.time()
            if many is not None:
                many(chunk, now)
            else:  # before issue 22: one call per row
                for r in chunk:
                    metrics.row_done(r, now)
        return (time.process_time() - c0) * 1e6 / max(1, len(decoded))

    def build_rows_alone(self, rows: list[dict[str, Any]]) -> float:
        """The tail's row building (match, rows, span event) for the same snapshots."""
        from board_outbox.model.codec import from_doc
        from board_outbox.model.errors import MalformedRow
        from board_outbox.model.rows import EffectRow
        from board_outbox.model.subscriptions import SubscriptionIndex

        snaps = [r.event for r in (from_doc(d, EffectRow, MalformedRow) for d in rows)
                 if r.kind == "launch" and r.event is not None]
        subs = SubscriptionIndex([Subscription(sub_id="t.s", tenant_id="t", bot="bot",
                                               rule=MatchRule())])
        tail = Tail(events=None, cursors=None, outbox=None, subs=None, cards=None,  # type: ignore[arg-type]
                    clock=SystemClock(), projections=[PROJECTION], tracer_provider=self.tp)
        tracer = self.tp.get_tracer("costs")
        settle()
        c0 = time.process_time()
        n = 0
        for i in range(0, len(snaps), self.batch):
            with tracer.start_as_current_span("board_outbox.materialize") as span:
                n += len(tail.build_rows("t", snaps[i:i + self.batch], subs, time.time(), span))
        return (time.process_time() - c0) * 1e6 / max(1, n)


def _bson_size(doc: dict[str, Any]) -> int:
    import bson

    return len(bson.encode({k: v for k, v in doc.items() if k != "_id"}))


async def run(uri: str, events: int = 1000, tenants: int = 5, batch: int = 500,
              log: Any = print, repeats: int = 5, mat_events: int = 5000) -> dict[str, Any]:
    """Materialize, its floor and the find_one floor run ``repeats`` times, interleaved; the
    best of each is reported (the machine is shared: other jobs' noise only ever adds CPU, and
    every figure is taken the same way, so the ratios compare like with like). Materialize
    runs on ``mat_events`` events (cheap per event: it needs many to rise above the noise),
    execution on ``events``."""
    from benchmarks.common import bot_runner

    r = Run(uri, tenants, events, batch, log)
    try:
        docs = event_docs(r.tenants, events, seed=3)
        mat_docs = event_docs(r.tenants, mat_events, seed=4)
        with bot_runner() as url:
            finds, mats, floors = [], [], []
            for _ in range(repeats):
                finds.append(await r.floor_find_one())
                mats.append(await r.materialize(mat_docs))
                floors.append(await r.floor_materialize(mat_docs, mats[-1]["_rows"]))
            find_one = min(finds)
            mat_floor = min(floors)
            mat = min(mats, key=lambda m: m["cpu_us_per_event"])
            rows = mat.pop("_rows")
            for m in mats:
                m.pop("_rows", None)
            mat["runs_cpu_us_per_event"] = [m["cpu_us_per_event"] for m in mats]
            launch = await r.execute("launch", docs, url)
            proj = await r.execute("projection", docs, url)
            launch_alone = min([await r.launch_alone(url) for _ in range(repeats)])
        metrics_per_row = r.metrics_alone(rows)
        build_per_row = r.build_rows_alone(rows)
    finally:
        await r.close()
    per_event = (mat["cpu_us_per_event"] + launch["cpu_us_per_row"] + proj["cpu_us_per_row"])
    out = {
        "events": events, "materialize_events": mat_events, "tenants": tenants, "tail_batch": batch,
        "worker_batch": WorkerSettings().batch_size,
        "repeats": repeats,
        "floor": {"find_one_cpu_us": find_one, "materialize_cpu_us_per_event": mat_floor,
                  "runs_find_one_cpu_us": finds, "runs_materialize_cpu_us_per_event": floors},
        "materialize": mat, "launch_row": launch, "projection_row": proj,
        "components_us_per_row": {
            "materialize (per event, 2 rows)": mat["cpu_us_per_event"],
            "materialize floor (per event)": mat_floor,
            "launch row (claim, launch, mark, telemetry)": launch["cpu_us_per_row"],
            "  HTTP launch alone": launch_alone,
            "  metrics per done row": metrics_per_row,
            "projection row": proj["cpu_us_per_row"],
            "tail row building (match, rows, span event)": build_per_row,
        },
        "service_cpu_us_per_event": per_event,
        "ratio_event_to_find_one": per_event / find_one,
        "ratio_materialize_to_floor": mat["cpu_us_per_event"] / mat_floor,
    }
    log(f"costs: find_one {find_one:.0f} µs | materialize {mat['cpu_us_per_event']:.0f} µs/event "
        f"(floor {mat_floor:.0f}, {out['ratio_materialize_to_floor']:.2f}x) | launch row "
        f"{launch['cpu_us_per_row']:.0f} µs | projection row {proj['cpu_us_per_row']:.0f} µs | "
        f"per event {per_event:.0f} µs = {out['ratio_event_to_find_one']:.2f}x find_one")
    return out


# --- before / after -----------------------------------------------------------------------------


def baseline(rev: str, uri: str, args: argparse.Namespace) -> dict[str, Any]:
    """The same workload on ``rev``'s source, in a child process, against the same server."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "src.tar"
        subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), rev, "src",
                        "projections"], check=True)
        with tarfile.open(archive) as tf:
            tf.extractall(tmp, filter="data")
        out = Path(tmp) / "result.json"
        env = {**os.environ, "PYTHONPATH": f"{tmp}/src:{tmp}/projections:{ROOT}"}
        subprocess.run([sys.executable, "-m", "benchmarks.costs", "--uri", uri, "--json-out",
                        str(out), "--events", str(args.events), "--tenants", str(args.tenants),
                        "--repeats", str(args.repeats), "--mat-events", str(args.mat_events),
                        "--no-sniffio"], check=True, env=env, cwd=tmp)
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def plot(before: dict[str, Any] | None, after: dict[str, Any]) -> None:
    from benchmarks.common import pyplot

    plt = pyplot()
    comps = list(after["components_us_per_row"])
    fig, ax = plt.subplots(figsize=(9, 4.8))
    ys = range(len(comps))
    if before is not None:
        ax.barh([y + 0.2 for y in ys], [before["components_us_per_row"].get(c, 0) for c in comps],
                height=0.4, label="before", color="C3")
    ax.barh([y - 0.2 for y in ys], [after["components_us_per_row"][c] for c in comps], height=0.4,
            label="after", color="tab:blue")
    ax.axvline(after["floor"]["find_one_cpu_us"], color="k", ls="--", lw=1,
               label=f"one bare find_one ({after['floor']['find_one_cpu_us']:.0f} µs)")
    ax.set_yticks(list(ys), comps, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("our CPU, µs per row (materialize: per event)")
    title = f"CPU per event: {after['ratio_event_to_find_one']:.1f}x one bare find_one"
    if before is not None:
        title = (f"CPU per event: {before['ratio_event_to_find_one']:.1f}x -> "
                 f"{after['ratio_event_to_find_one']:.1f}x one bare find_one (same server)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(RESULTS / "costs.png", dpi=100)
    plt.close(fig)


def _log(msg: str) -> None:
    print(msg, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1000, help="events executed")
    ap.add_argument("--mat-events", type=int, default=5000, help="events materialized")
    ap.add_argument("--tenants", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--uri", help="a running server (default: MONGODB_URI, else a wire server)")
    ap.add_argument("--baseline", metavar="REV", help="also measure git revision REV (before)")
    ap.add_argument("--json-out", help=argparse.SUPPRESS)
    ap.add_argument("--no-sniffio", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.no_sniffio:
        from benchmarks.common import NoSniffio

        sys.modules.pop("sniffio", None)
        sys.meta_path.insert(0, NoSniffio())
    uri = args.uri or os.environ.get("MONGODB_URI")
    if args.json_out:  # a baseline child: measure, write, done
        assert uri
        res = anyio.run(run, uri, args.events, args.tenants, 500, _log, args.repeats,
                        args.mat_events)
        Path(args.json_out).write_text(json.dumps(res))
        return 0
    from benchmarks.common import write_result
    from board_outbox.service.wireserver import WireServer

    def measure(uri: str, server: dict[str, Any]) -> None:
        after = anyio.run(run, uri, args.events, args.tenants, 500, _log, args.repeats,
                          args.mat_events)
        write_result("costs", {"wire_server": server, "baseline": None, "before": None,
                               "after": after})
        before = baseline(args.baseline, uri, args) if args.baseline else None
        write_result("costs", {"wire_server": server, "baseline": args.baseline,
                               "before": before, "after": after})
        plot(before, after)

    if uri:
        measure(uri, {"server": "given", "address": uri.split("@")[-1].split("/")[0]})
    else:
        with WireServer() as server:
            measure(server.uri, server.info())
    return 0


if __name__ == "__main__":
    sys.exit(main())
