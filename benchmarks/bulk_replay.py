"""Bulk replay of dead-letters on the wire: what a plan costs and how fast an
apply writes.

Workload: ``rows`` dead-letters over 10 tenants (3 subscriptions each, the last error one of
three classes), parked at 50 distinct instants (so pages cross ties), beside ``live`` pending and
``done`` rows no filter may take (the history a bad query would scan). Measured, with pymongo's
command monitoring and this process's wall clock:

- the plan of every dead-letter, of one tenant, and of one error class across tenants (a check
  the store cannot make): queries sent, documents read, seconds;
- the apply of one tenant's rows at an unlimited rate (``--rate`` 100,000: the store's own cost
  per fenced write) and at 100 rows/s (the pacing), rows/s achieved and writes sent.

    python -m benchmarks.bulk_replay [--rows N]   # MONGODB_URI, else a wire server
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio
from pymongo import monitoring

from board_outbox.engine.upkeep.bulk_replay import apply_bulk_replay, plan_bulk_replay
from board_outbox.model.board import EventSnapshot
from board_outbox.model.clock import SystemClock
from board_outbox.model.dead_letters import BulkFilter
from board_outbox.model.rows import ErrorEntry, new_launch_row, new_row_doc
from board_outbox.model.subscriptions import Subscription

from .common import mongo_uri, open_backend, write_result

ERRORS = ("LaunchFailed: bot runner answered 503", "TimeoutError: bot took 30 s",
          "HTTPError: 410 Gone")


class Sent(monitoring.CommandListener):
    def __init__(self) -> None:
        self.by: dict[str, int] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.by[event.command_name] = self.by.get(event.command_name, 0) + 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def run(uri: str, rows: int, history: int) -> dict[str, Any]:
    sent = Sent()
    async with open_backend("mongo", uri, listeners=[sent]) as b:
        outbox, subs = b.stores.outbox, b.stores.subs
        coll = outbox.coll  # type: ignore[attr-defined]
        now = time.time()
        docs = []
        for i in range(rows + history):
            tenant = f"t{i % 10}"
            sub = Subscription(sub_id=f"{tenant}-s{i % 3}", tenant_id=tenant, bot=f"bot{i % 3}")
            if i < 30:
                await subs.put(sub)
            ev = EventSnapshot(seq=i + 1, type="card.created", card_id=f"c{i}", at=now - 3600)
            row = new_launch_row(tenant, ev, sub, now - 3600)
            if i < rows:
                row.state, row.attempts = "failed", 3  # type: ignore[assignment]
                row.errors = [ErrorEntry(attempt=3, at=now, error=ERRORS[i % 3])]
                row.updated_at = now - 3000 + (i % 50)  # 50 instants: ties across pages
            else:
                row.state = "done" if i % 2 else "pending"  # type: ignore[assignment]
            docs.append(new_row_doc(row))
        for lo in range(0, len(docs), 5000):
            await coll.insert_many(docs[lo:lo + 5000], ordered=False)
        out: dict[str, Any] = {"dead_letters": rows, "other_rows": history}
        clock = SystemClock()
        for name, flt in (("every dead-letter", BulkFilter(limit=10**9)),
                          ("one tenant", BulkFilter(tenant="t3", limit=10**9)),
                          ("one error class", BulkFilter(error_class="TimeoutError", limit=10**9))):
            sent.by.clear()
            t0 = time.perf_counter()
            plan = await plan_bulk_replay(outbox, subs, flt, clock=clock)
            wall = time.perf_counter() - t0
            out[f"plan: {name}"] = {"matched": plan.matched, "read": plan.read,
                                    "finds": sent.by.get("find", 0) + sent.by.get("getMore", 0),
                                    "seconds": round(wall, 3)}
            print(f"plan of {name}: {plan.matched} match, {plan.read} documents read, "
                  f"{out[f'plan: {name}']['finds']} queries, {wall:.2f} s", flush=True)
        for tenant, rate in (("t3", 100_000.0), ("t4", 100.0)):
            plan = await plan_bulk_replay(outbox, subs, BulkFilter(tenant=tenant, limit=300),
                                          clock=clock)
            sent.by.clear()
            t0 = time.perf_counter()
            prog = await apply_bulk_replay(outbox, subs, plan, bulk_id="bench", by="bench",
                                           clock=clock, rate=rate)
            wall = time.perf_counter() - t0
            out[f"apply at {rate:g} rows/s"] = {
                "replayed": prog.replayed, "seconds": round(wall, 3),
                "rows_per_second": round(prog.replayed / wall, 1),
                "updates": sent.by.get("update", 0), "finds": sent.by.get("find", 0)}
            print(f"apply at --rate {rate:g}: {prog.replayed} rows in {wall:.2f} s "
                  f"({prog.replayed / wall:.0f} rows/s), {sent.by.get('update', 0)} updates, "
                  f"{sent.by.get('find', 0)} page queries", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=5000, help="dead-letters (default 5000)")
    ap.add_argument("--history", type=int, default=20000, help="pending and done rows beside them")
    args = ap.parse_args()
    uri = mongo_uri()
    if uri is not None:
        res = anyio.run(run, uri, args.rows, args.history)
    else:
        from board_outbox.service.wireserver import WireServer

        with WireServer() as server:
            res = anyio.run(run, server.uri, args.rows, args.history)
    print(write_result("bulk-replay", {"results": res}))


if __name__ == "__main__":
    main()
