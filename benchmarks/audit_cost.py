"""The completeness audit's cost per event audited, on the wire (A1, W4 style): store commands
(pymongo command monitoring) and this process's CPU (``time.process_time``) per event.

Workload: ``tenants`` tenants with one subscription each and the board-reflect projection,
``events`` events materialized by the tail first (each event: one launch row, one projection
row). Measured: one full ``audit`` of every tenant (batch ``batch``), then one ``--repair`` run
after deleting 1% of the projection rows.

    python -m benchmarks.audit_cost [--events N] [--batch B]   # MONGODB_URI, else a wire server
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio

from board_outbox.engine.tail.tail import Tail, TailSettings
from board_outbox.engine.upkeep.audit import Auditor
from board_outbox.model.clock import SystemClock
from board_outbox.service.runtime import build_registry

from .common import (
    CommandCounter,
    mongo_uri,
    open_backend,
    settle_heap,
    synthetic_board,
    write_result,
)


async def run(uri: str, events: int, tenants: int, batch: int) -> dict[str, Any]:
    counter = CommandCounter()
    async with open_backend("mongo", uri, listeners=[counter]) as b:
        names = await synthetic_board(b, tenants=tenants, subs_per_tenant=1, events=events, seed=5)
        registry = build_registry(b.stores, ["board-reflect"])
        tail = Tail(events=b.stores.events, cursors=b.stores.cursors, outbox=b.stores.outbox,
                    subs=b.stores.subs, cards=b.stores.cards, clock=SystemClock(),
                    settings=TailSettings(batch_size=500, seed="earliest"),
                    projections=registry.projections)
        for _ in range(events):
            if not sum(r.materialized for r in await tail.drain_all(names)):
                break
        auditor = Auditor(tail, batch_size=batch)
        out: dict[str, Any] = {"events": events, "tenants": tenants, "batch_size": batch}
        for phase in ("audit", "repair"):
            if phase == "repair":  # 1% of the projection rows deleted behind the service's back
                db = b.stores.outbox.coll.database  # type: ignore[attr-defined]
                victims = [d["_id"] async for d in db["trigger_effects"].find(
                    {"kind": "projection"}, {"_id": 1}).limit(max(1, events // 100))]
                await db["trigger_effects"].delete_many({"_id": {"$in": victims}})
            settle_heap()
            counter.reset()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            audited = missing = repaired = rows = 0
            for t in names:
                rep = await auditor.audit(t, repair=phase == "repair")
                audited += rep.events
                rows += rep.rows_checked
                missing += len(rep.missing)
                repaired += rep.repaired
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            out[phase] = {
                "events_audited": audited, "rows_checked": rows, "missing": missing,
                "repaired": repaired, "commands": dict(counter.by_name),
                "commands_total": counter.total, "commands_per_event": counter.total / max(1, audited),
                "cpu_us_per_event": cpu * 1e6 / max(1, audited), "wall_s": wall,
            }
            print(f"audit cost ({phase}): {audited} events, {rows} rows, {missing} missing, "
                  f"{repaired} repaired: {out[phase]['commands_per_event']:.4f} commands/event, "
                  f"{out[phase]['cpu_us_per_event']:.0f} µs CPU/event ({wall:.1f} s wall)",
                  flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--tenants", type=int, default=2)
    ap.add_argument("--batch", type=int, default=500)
    args = ap.parse_args()
    uri = mongo_uri()
    if uri is not None:
        res = anyio.run(run, uri, args.events, args.tenants, args.batch)
    else:
        from board_outbox.service.wireserver import WireServer

        with WireServer() as server:
            res = anyio.run(run, server.uri, args.events, args.tenants, args.batch)
    print(write_result("audit-cost", {"results": res}))


if __name__ == "__main__":
    main()
