"""The hot queries' cost as the backlog grows (T1): every claim, reclaim, steal,
hand-off, mark, status and gauge statement, run through the production adapter
(``MongoEffectOutbox``, the code ``board-outbox run`` calls) against collections holding 2,000
and 20,000 pending rows (and as many done rows), on one server, in one run.

For each statement kind: the server's CPU per call (utime + stime of the server process from
/proc, over ``--reps`` calls, this script's own client idle meanwhile), the round trip, and the
plan the server chose (``explain`` of the exact command the adapter sent, captured by a command
listener; ``queryPlanner.winningPlan`` stages and the index name, where the server explains).
A cost that is O(batch) stays flat from 2,000 to 20,000 rows; an O(backlog) one grows ~10x.

Run: ``.venv/bin/python -m benchmarks.queries`` (``--sizes 2000,20000 --reps 20``). Writes
``results/queries.json`` and ``queries.png``. Uses ``MONGODB_URI`` when set (then no CPU figure:
the server may be another machine), else starts the wire server.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import anyio
from pymongo import AsyncMongoClient, MongoClient, monitoring

from board_outbox.adapters.mongo import ensure_schema
from board_outbox.adapters.mongo.outbox import MongoEffectOutbox
from board_outbox.model import transitions as T
from board_outbox.model.rows import EffectRow
from board_outbox.ports import ClaimTerms
from board_outbox.service.wireserver import WireServer

from .common import RESULTS, cpu_seconds, pyplot, write_result

TENANTS = 10
BATCH = 20
EXPLAINED = ("find", "aggregate", "count", "distinct")


class Captured(monitoring.CommandListener):
    """The commands the adapter sends (the last of each kind is explained afterwards)."""

    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in (*EXPLAINED, "update", "insert", "findAndModify"):
            cmd = {k: v for k, v in event.command.items() if not k.startswith("$") and k not in
                   ("lsid", "txnNumber", "readConcern", "writeConcern")}
            self.commands.append(cmd)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def seed(db: Any, pending: int, now: float) -> None:
    """``pending`` pending rows (due, 90% of them one tenant's burst), as many done rows, 200
    claimed rows (half with expired leases) and 100 dead-letters, across ``TENANTS`` tenants."""
    rows = db["trigger_effects"]
    docs: list[dict[str, Any]] = []

    def row(i: int, tenant: str, state: str, **extra: Any) -> dict[str, Any]:
        return {"tenant_id": tenant, "seq": i, "row_key": f"{tenant}/{i}/{state}/{uuid.uuid4().hex[:6]}",
                "kind": "launch", "sub_id": f"{tenant}.s", "card_id": "c1", "event_type": "card.updated",
                "state": state, "attempts": 0, "created_at": now - 60, "updated_at": now - 60,
                "not_before": now - 60 + i * 1e-4, "lease_until": None, **extra}

    for i in range(pending):
        tenant = "t00" if i % 10 else f"t{i % (TENANTS * 10) // 10:02d}"
        docs.append(row(i, tenant, "pending"))
        docs.append(row(i, f"t{i % TENANTS:02d}", "done", done_at=datetime.now(UTC), outcome="ok"))
    for i in range(200):
        docs.append(row(i, f"t{i % TENANTS:02d}", "claimed", claim_id="old",
                        lease_until=now - 5 if i % 2 else now + 600))
    for i in range(100):
        docs.append(row(i, f"t{i % TENANTS:02d}", "failed"))
    for i in range(0, len(docs), 5000):
        rows.insert_many(docs[i:i + 5000])


def plan_of(explained: dict[str, Any]) -> str:
    """The winning plan as its stages, outermost first, with the index an IXSCAN uses."""
    planner = explained.get("queryPlanner") or (
        (explained.get("stages") or [{}])[0].get("$cursor", {}).get("queryPlanner", {}))
    node = planner.get("winningPlan") or {}
    node = node.get("queryPlan", node)
    out: list[str] = []
    while isinstance(node, dict) and node:
        stage = str(node.get("stage", "?"))
        if node.get("indexName"):
            stage += f"({node['indexName']})"
        out.append(stage)
        nxt = node.get("inputStage") or (node.get("inputStages") or [None])[0]
        node = nxt if isinstance(nxt, dict) else {}
    return " <- ".join(out) or "?"


async def measure(name: str, call: Callable[[], Awaitable[Any]], reps: int, server_pid: int | None,
                  captured: Captured) -> dict[str, Any]:
    await call()  # warm: plan cache, connection
    captured.commands.clear()
    c0 = cpu_seconds(server_pid) if server_pid else 0.0
    t0 = time.perf_counter()
    for _ in range(reps):
        await call()
    wall = time.perf_counter() - t0
    cpu = (cpu_seconds(server_pid) - c0) if server_pid else None
    return {"statement": name, "commands_per_call": round(len(captured.commands) / reps, 2),
            "server_cpu_ms": None if cpu is None else round(cpu * 1000 / reps, 2),
            "round_trip_ms": round(wall * 1000 / reps, 2),
            "sent": captured.commands[-len(captured.commands) // reps:] if captured.commands else []}


async def run_size(uri: str, pid: int | None, size: int, reps: int) -> list[dict[str, Any]]:
    name = f"q_{size}_{int(time.time()) % 10**6}"
    sync: MongoClient[dict[str, Any]] = MongoClient(uri)
    now = time.time()
    seed(sync[name], size, now)
    captured = Captured()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, event_listeners=[captured])
    db = client[name]
    await ensure_schema(db)
    outbox = MongoEffectOutbox(db)
    lease = 30.0

    async def claim() -> None:  # the fair pick + the claim write (the worker's pick)
        got = await outbox.claim_any(now, lease, BATCH)
        # give them back: the pending set stays the size under test
        await outbox.apply_marks([T.Mark(c.ref, c.claim_id, T.release(now=now)) for c in got])

    async def steal() -> None:  # the pick of a replica that owns other tenants (S1 steal)
        got = await outbox.claim_any(now, lease, BATCH, prefer={"t05"}, steal_before=now - 1)
        await outbox.apply_marks([T.Mark(c.ref, c.claim_id, T.release(now=now)) for c in got])

    async def reclaim() -> None:  # the expired-lease sweep (nothing expired: the usual case)
        await outbox.reclaim_expired(now - 10, lease, BATCH)

    seq = [10**7]

    async def handoff() -> None:  # a tail's insert of born-claimed rows, then their done marks
        terms = ClaimTerms(claim_id=uuid.uuid4().hex, lease_until=now + lease)
        rows = []
        for _ in range(BATCH):
            seq[0] += 1
            rows.append(EffectRow(tenant_id="t01", seq=seq[0], row_key=f"t01/{seq[0]}/sub/s",
                                  sub_id="t01.s", created_at=now, updated_at=now, not_before=now))
        res = await outbox.upsert_rows(rows, claim=terms)
        done = T.done(now=now, outcome="ok")
        await outbox.apply_marks([T.Mark(c.ref, c.claim_id, done) for c in res.claims])

    async def gauges() -> None:  # the service's rows-by-state gauge (live states)
        await outbox.count_by_state(states=["pending", "claimed", "failed"])

    async def done_gauge() -> None:  # the done count (every sixth refresh)
        await outbox.count_by_state(states=["done"])

    async def tenants() -> None:  # the tail's tenants with live rows (M11)
        await outbox.live_tenants()

    async def status() -> None:  # `board-outbox status --tenant`: one tenant's rows by state
        await outbox.count_by_state("t01")

    out = []
    for label, call in [("claim (pick + claim + release)", claim), ("steal pick", steal),
                        ("reclaim sweep", reclaim), ("hand-off insert + bulk done", handoff),
                        ("gauge: live states", gauges), ("gauge: done", done_gauge),
                        ("live tenants", tenants), ("status of one tenant", status)]:
        r = await measure(label, call, reps, pid, captured)
        plans = []
        for cmd in r.pop("sent"):
            kind = next(iter(cmd))
            if kind not in EXPLAINED:
                continue
            try:
                ex = sync[name].command({"explain": cmd, "verbosity": "queryPlanner"})
                plans.append(f"{kind}: {plan_of(ex)}")
            except Exception as exc:  # a server without explain for this command
                plans.append(f"{kind}: explain failed ({type(exc).__name__})")
        r["plans"] = sorted(set(plans))
        r["pending_rows"] = size
        out.append(r)
        print(r, flush=True)
    await client.close()
    sync.drop_database(name)
    sync.close()
    return out


def plot(rows: list[dict[str, Any]], path: Any) -> None:
    plt = pyplot()
    sizes = sorted({r["pending_rows"] for r in rows})
    names = list(dict.fromkeys(r["statement"] for r in rows))
    key = "server_cpu_ms" if rows[0]["server_cpu_ms"] is not None else "round_trip_ms"
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(sizes)
    for j, size in enumerate(sizes):
        ys = [next((r[key] for r in rows if r["statement"] == n and r["pending_rows"] == size), 0)
              for n in names]
        ax.bar([i + j * width for i in range(len(names))], ys, width,
               label=f"{size:,} pending + {size:,} done rows")
    ax.set_xticks([i + width * (len(sizes) - 1) / 2 for i in range(len(names))])
    ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(f"{key.replace('_', ' ')} per call")
    ax.set_title("hot statements through the production adapter: flat = O(batch)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2000,20000")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--name", default="queries")
    args = ap.parse_args()
    uri = os.environ.get("MONGODB_URI")
    wire = WireServer().start() if not uri else None
    try:
        target = uri or wire.uri  # type: ignore[union-attr]
        pid = None if uri else wire.pid  # type: ignore[union-attr]
        rows: list[dict[str, Any]] = []
        for size in (int(x) for x in args.sizes.split(",")):
            rows += anyio.run(run_size, target, pid, size, args.reps)
    finally:
        if wire is not None:
            wire.close()
    write_result(args.name, {"statements": rows, "setup": {
        "server": "MONGODB_URI" if uri else "secantusd-py (WireServer)", **vars(args)}})
    plot(rows, RESULTS / f"{args.name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
