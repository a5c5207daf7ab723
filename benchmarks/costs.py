"""Server-independent costs on the wire (SPEC W4): store commands and the service's own CPU per
materialized event and per executed row.

Round trips and our CPU carry over from the wire server we measure on to mongod; the server's
own speed does not (see docs/testing.md). Commands are counted client-side with pymongo
command monitoring; CPU is this process's CPU time (``time.process_time``: our code plus
pymongo's encoding and decoding), so the server's CPU is excluded by construction.

Workload: ``tenants`` tenants, one subscription each that matches every event, events already
in ``board_events``. Phase 1 drains the tails until every cursor is at the head (every event
gives one launch row); phase 2 runs the worker (launch handler, in-process launcher) until every
row is done.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

from pymongo import monitoring

from board_outbox.engine.tail import Tail, TailSettings
from board_outbox.engine.worker import EffectWorker, WorkerSettings
from board_outbox.model.clock import SystemClock
from board_outbox.service.runtime import build_registry

from .common import open_backend, settle_heap, synthetic_board


class CommandCounter(monitoring.CommandListener):
    def __init__(self) -> None:
        self.by_name: Counter[str] = Counter()
        self.server_us = 0

    def reset(self) -> None:
        self.by_name.clear()
        self.server_us = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._count(event.command_name, event.duration_micros)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._count(event.command_name, event.duration_micros)

    def _count(self, name: str, us: int) -> None:
        self.by_name[name] += 1
        self.server_us += us

    @property
    def total(self) -> int:
        return sum(self.by_name.values())


async def run(uri: str, events: int, tenants: int, batch: int, log: Any = print) -> dict[str, Any]:
    counter = CommandCounter()
    async with open_backend("mongo", uri, listeners=[counter]) as b:
        # one subscription per tenant, which every event matches: one launch row per event
        names = await synthetic_board(b, tenants=tenants, subs_per_tenant=1, events=events, seed=3)
        tail = Tail(events=b.stores.events, cursors=b.stores.cursors, outbox=b.stores.outbox,
                    subs=b.stores.subs, cards=b.stores.cards, clock=SystemClock(),
                    settings=TailSettings(batch_size=batch, seed="earliest",
                                      batch_seconds=3600))  # the fixed batch is measured
        for t in names:
            await tail.cursor(t)
        settle_heap()
        counter.reset()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        materialized = rows = passes = 0
        while True:
            results = await tail.drain_all(names)
            passes += 1
            got = sum(r.materialized for r in results)
            materialized += got
            rows += sum(r.rows for r in results)
            if got == 0:
                break
        mat = {"events": materialized, "rows": rows, "drain_passes": passes,
               "wall_s": time.perf_counter() - wall0, "cpu_s": time.process_time() - cpu0,
               "commands": dict(counter.by_name), "commands_total": counter.total}
        mat["cpu_us_per_event"] = mat["cpu_s"] * 1e6 / max(1, materialized)
        mat["commands_per_event"] = counter.total / max(1, materialized)
        log(f"costs: materialize {materialized} events -> {rows} rows: "
            f"{mat['commands_per_event']:.3f} commands/event, {mat['cpu_us_per_event']:.0f} µs CPU/event "
            f"({mat['wall_s']:.1f} s wall)")

        registry = build_registry(b.stores, [])
        worker = EffectWorker(outbox=b.stores.outbox, registry=registry, clock=SystemClock(),
                              settings=WorkerSettings(batch_size=20,
                                                                            lease_seconds=120),
                              rng=random.Random(1))
        settle_heap()
        counter.reset()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        done = ticks = 0
        while done < rows:
            res = await worker.tick_any()
            ticks += 1
            done += res.done
            if res.claimed == 0 and ticks > 3 * rows:
                break
        exe = {"rows": done, "ticks": ticks, "wall_s": time.perf_counter() - wall0,
               "cpu_s": time.process_time() - cpu0, "commands": dict(counter.by_name),
               "commands_total": counter.total}
        exe["cpu_us_per_row"] = exe["cpu_s"] * 1e6 / max(1, done)
        exe["commands_per_row"] = counter.total / max(1, done)
        log(f"costs: execute {done} launch rows: {exe['commands_per_row']:.3f} commands/row, "
            f"{exe['cpu_us_per_row']:.0f} µs CPU/row ({exe['wall_s']:.1f} s wall)")
    return {"events": events, "tenants": tenants, "batch_size": batch,
            "materialize": mat, "execute": exe}
