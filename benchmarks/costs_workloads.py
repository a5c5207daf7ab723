"""The workloads ``costs.py`` measures: ours on the production path (the tail materializing, the
worker executing launch and projection rows, each component alone) and the bare-driver floor
doing the same rows, each returning its CPU per event or row. Separate from the command line
and the figure that run and report them."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from typing import Any

from pymongo import AsyncMongoClient, UpdateOne

from benchmarks.costs_probes import (
    cpu_of,
    load_board,
    server_ops,
    server_ops_since,
    settle,
    telemetry_on,
)
from board_outbox.adapters.launchers import HttpLauncher
from board_outbox.adapters.mongo import ensure_schema, mongo_stores
from board_outbox.engine.tail.tail import Tail, TailSettings
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.engine.work.worker import EffectWorker, WorkerSettings
from board_outbox.model.clock import SystemClock
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import LaunchRequest, Stores
from board_outbox.service.runtime import build_registry

PROJECTION = "board-reflect"


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
            else:  # the old path: one call per row
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
