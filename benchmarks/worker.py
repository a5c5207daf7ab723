"""Worker throughput: rows executed per second per replica with 1/2/4 workers, no-op handler."""

from __future__ import annotations

import random
import time
from typing import Any

import anyio

from board_outbox.engine.handlers.registry import ExecutionContext, HandlerRegistry
from board_outbox.engine.tail.tail import Tail, TailSettings
from board_outbox.engine.work.worker import EffectWorker, WorkerSettings
from board_outbox.model.clock import SystemClock
from board_outbox.model.rows import EffectRow

from .common import open_backend, settle_heap, synthetic_board


class Noop:
    async def execute(self, row: EffectRow, ctx: ExecutionContext) -> str:
        return "noop"


async def run(backends: list[str], uri: str | None, rows: int, workers: list[int],
              log: Any = print) -> list[dict[str, Any]]:
    results = []
    for name in backends:
        for n in workers:
            async with open_backend(name, uri) as b:
                tenants = await synthetic_board(b, tenants=10, subs_per_tenant=1, events=rows)
                tail = Tail(events=b.stores.events, cursors=b.stores.cursors, outbox=b.stores.outbox,
                            subs=b.stores.subs, cards=b.stores.cards, clock=SystemClock(),
                            settings=TailSettings(batch_size=1000, seed="earliest"))
                await tail.drain_all(tenants)
                reg = HandlerRegistry()
                reg.register("launch", Noop())
                ws = [EffectWorker(outbox=b.stores.outbox, registry=reg, clock=SystemClock(),
                                   rng=random.Random(i),
                                   settings=WorkerSettings(batch_size=50)) for i in range(n)]
                done = 0

                async def loop(w: EffectWorker) -> None:
                    nonlocal done
                    while True:
                        res = await w.tick_any()
                        done += res.done
                        if res.claimed == 0:
                            return

                settle_heap()
                t0 = time.perf_counter()
                async with anyio.create_task_group() as tg:
                    for w in ws:
                        tg.start_soon(loop, w)
                elapsed = time.perf_counter() - t0
                assert done == rows, (done, rows)
                r = {"backend": name, "workers": n, "rows": rows, "rows_per_s": rows / elapsed}
                results.append(r)
                log(f"worker      {name:6} workers={n}  {r['rows_per_s']:9,.0f} rows/s per replica")
    return results
