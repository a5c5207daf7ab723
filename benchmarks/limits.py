"""Launch limits across replicas (F2): four ``Service`` replicas, each with its own client
(as four ``run`` processes would have), against one database on the MongoDB-wire server.

One tenant, one subscription, ``--rows`` events (claims of ``BATCH`` rows): ``--rows`` launch
rows of one bot, each launch taking ``--launch-ms`` in the in-process bot runner
(``common.CountingRunner``), which records the most launches of the bot in flight at once. For
``bot_in_flight`` = none, 1, 2 and 4 (and ``limits.wait_seconds`` at its default, 0.25 s, and at
0.05 s), reported per run:

- the most launches in flight at once (the runner's count; the goal: never above the limit);
- the time from the services' start to the last launch, and the ideal (rows x launch time /
  the concurrency the limit allows, at most one per replica: a replica runs its rows one by one);
- the rows deferred (over the limit: back to pending, attempts unchanged) and the attempts the
  rows ended with (the goal: none spent by a deferral);
- the store commands per launch (every replica's client, counted by command monitoring).

Run: ``.venv/bin/python -m benchmarks.limits`` (about a minute; ``--plot-only`` re-draws the PNG).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter
from typing import Any

import anyio
from pymongo import AsyncMongoClient

from board_outbox.adapters.mongo import ensure_schema, mongo_stores
from board_outbox.ports import RowFilter
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.service.wireserver import WireServer

from .common import RESULTS, CommandCount, CountingRunner, one_bot_backlog, pyplot, write_result

REPLICAS = 4
# claims of a few rows, so every replica has launches to run (with claims of 20 the first
# replica takes most of the backlog and runs it alone, one by one)
BATCH = 4
T = "acme"


async def one_run(uri: str, rows: int, launch_s: float, in_flight: int, wait: float) -> dict[str, Any]:
    commands = CommandCount()
    clients: list[Any] = [AsyncMongoClient(uri, tz_aware=True, event_listeners=[commands])
                          for _ in range(REPLICAS)]
    name = f"bench_limits_{random.randrange(10**9)}"
    runner = CountingRunner(launch_s)
    try:
        await ensure_schema(clients[0][name])
        replicas = [mongo_stores(c[name], runner, change_feed=False) for c in clients]
        first = replicas[0]
        await one_bot_backlog(first, T, "triage", rows, time.time())
        cfg = load_config(env={}, projections=[], tail={"seed": "earliest", "change_streams": False},
                          service={"http_port": 0}, worker={"batch_size": BATCH},
                          limits={"bot_in_flight": in_flight, "wait_seconds": wait})
        services = [Service(s, cfg, rng=random.Random(i)) for i, s in enumerate(replicas)]
        before = commands.n
        t0 = time.monotonic()
        with anyio.fail_after(300):
            async with anyio.create_task_group() as tg:
                for svc in services:
                    tg.start_soon(svc.run)
                while sum(runner.launched.values()) < rows:
                    await anyio.sleep(0.01)
                elapsed = time.monotonic() - t0
                used = commands.n - before
                for svc in services:
                    svc.stop()
        docs = await first.outbox.find(RowFilter(tenant_id=T, limit=rows * 2))
    finally:
        await clients[0].drop_database(name)
        for c in clients:
            await c.close()
    allowed = min(in_flight or REPLICAS, REPLICAS)
    return {
        "bot_in_flight": in_flight or None, "wait_seconds": wait, "rows": rows,
        "launch_ms": launch_s * 1000, "replicas": REPLICAS,
        "max_in_flight": runner.most["triage"],
        "seconds": round(elapsed, 3), "ideal_seconds": round(rows * launch_s / allowed, 3),
        "deferred": sum(svc.stats.worker.deferred for svc in services),
        "launches_per_row": dict(Counter(runner.launched.values())),
        "attempts": dict(Counter(r.attempts for r in docs)),
        "states": dict(Counter(r.state for r in docs)),
        "commands_per_launch": round(used / rows, 1),
    }


def plot(runs: list[dict[str, Any]], path: Any) -> None:
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for wait, marker in ((0.25, "o"), (0.05, "s")):
        rs = [r for r in runs if r["wait_seconds"] == wait]
        xs = [str(r["bot_in_flight"] or "none") for r in rs]
        a.plot(xs, [r["max_in_flight"] for r in rs], marker=marker, label=f"wait {wait}s")
        b.plot(xs, [r["seconds"] / r["ideal_seconds"] for r in rs], marker=marker,
               label=f"wait {wait}s")
    a.plot(["none", "1", "2", "4"], [REPLICAS, 1, 2, 4], "k--", lw=0.8, label="the limit")
    a.set(xlabel="bot_in_flight", ylabel="most launches in flight (runner)",
          title=f"{REPLICAS} replicas, one bot")
    b.set(xlabel="bot_in_flight", ylabel="time / ideal", title="time to launch every row")
    for ax in (a, b):
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=96)
    ap.add_argument("--launch-ms", type=float, default=50.0)
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args()
    if args.plot_only:
        plot(json.loads((RESULTS / "limits.json").read_text())["runs"], RESULTS / "limits.png")
        return 0
    server = WireServer().start()
    runs: list[dict[str, Any]] = []
    try:
        for wait in (0.25, 0.05):
            for in_flight in (0, 1, 2, 4):
                runs.append(anyio.run(one_run, server.uri, args.rows, args.launch_ms / 1000,
                                      in_flight, wait))
                print(json.dumps(runs[-1]), flush=True)
    finally:
        server.stop()
    write_result("limits", {"runs": runs, "setup": vars(args), "wire_server": "secantusd-py"})
    plot(runs, RESULTS / "limits.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
