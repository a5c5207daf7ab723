"""Insert -> row materialized and insert -> done latency, change-stream wake vs polling only."""

from __future__ import annotations

import random
import time
from typing import Any

import anyio

from board_outbox.model.rows import EffectRow
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service

from .common import open_backend, percentiles, synthetic_board


async def one(name: str, uri: str | None, *, stream: bool, poll: float, events: int,
              rate: float) -> dict[str, Any]:
    async with open_backend(name, uri) as b:
        tenants = await synthetic_board(b, tenants=4, subs_per_tenant=2, events=0)
        cfg = load_config(env={}, projections=[], tail={"poll_interval_seconds": poll,
                          "change_streams": stream, "seed": "earliest"},
                          worker={"idle_seconds": 0.5 if stream else poll, "batch_size": 50})
        inserted: dict[str, float] = {}
        materialized: list[float] = []
        done: list[float] = []

        def on_done(row: EffectRow, _outcome: str) -> None:
            t = time.time()
            ins = inserted.get(f"{row.tenant_id}/{row.seq}")
            if ins is not None:
                materialized.append((row.materialized_at - ins) * 1000)
                done.append((t - ins) * 1000)

        service = Service(b.stores, cfg, rng=random.Random(1), on_done=on_done)
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            await anyio.sleep(0.3)
            rng = random.Random(2)
            for i in range(events):
                t = tenants[i % len(tenants)]
                seq = await b.stores.events.allocate_seq(t)
                inserted[f"{t}/{seq}"] = time.time()
                await b.stores.events.insert({"tenant_id": t, "seq": seq, "type": "card.updated",
                                              "card_id": f"c{rng.randrange(200)}", "at": time.time()})
                await anyio.sleep(1.0 / rate)
            with anyio.move_on_after(max(5.0, 3 * poll)):
                while len(done) < events:
                    await anyio.sleep(0.01)
            service.stop()
        return {"backend": name, "mode": "change stream" if stream else f"poll {poll:g}s",
                "events": events, "rate": rate, "completed": len(done),
                "materialize_ms": percentiles(materialized), "done_ms": percentiles(done),
                "done_samples_ms": sorted(done)}


async def run(backends: list[str], uri: str | None, events: int, rate: float, polls: list[float],
              log: Any = print) -> list[dict[str, Any]]:
    results = []
    for name in backends:
        modes = [(True, 1.0)] + [(False, p) for p in polls]
        for stream, poll in modes:
            r = await one(name, uri, stream=stream, poll=poll, events=events, rate=rate)
            results.append(r)
            m, d = r["materialize_ms"], r["done_ms"]
            log(f"latency     {name:6} {r['mode']:14} insert->materialized p50 {m.get('p50', 0):7.1f} "
                f"p99 {m.get('p99', 0):7.1f} ms | insert->done p50 {d.get('p50', 0):7.1f} "
                f"p95 {d.get('p95', 0):7.1f} p99 {d.get('p99', 0):7.1f} ms ({r['completed']}/{events})")
    return results
