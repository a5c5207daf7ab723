"""A slow tenant beside fast ones (F1: lanes that outlive the batch).

One tenant's bot takes ``--slow-seconds`` (8 s) a launch; it has ``--slow-events`` (3) events.
Half a second after them, while its first launch runs, three fast tenants insert 5 events each
(``batch_size = 20``, the default projection on: a launch row and a projection row per event).
The launcher gives up on a launch after ``--timeouts`` seconds (20 s: the slow launches finish;
5 s: each fails and is retried after its backoff). Reported: how many of the 15 fast launches
happened within ``--window`` seconds, and their insert -> launch call p50 / p99 (the p99 of 15
is their slowest), against the same fast tenants with no slow tenant (unloaded).
Goal: the fast tenants' p99 beside the slow tenant <= 2x their unloaded p99.

Each case runs in a process of its own (one in-process ``Service``; on the wire against a
SecantusDB of its own), this checkout's and, with ``--baseline SRC``, another checkout's src/
interleaved case by case in the same run.

Run: ``.venv/bin/python -m benchmarks.slow_tenant --baseline OTHER/src`` (``--only memory|wire``;
``--plot-only`` re-draws the PNG from the JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from .common import RESULTS, write_result

FAST = ("f1", "f2", "f3")
SRC = Path(__file__).resolve().parent.parent / "src"


async def case(backend: str, timeout: float, loaded: bool, slow_seconds: float,
               slow_events: int, window: float) -> dict[str, Any]:
    """One case in this process: what the fast tenants' launches waited."""
    from board_outbox.adapters.memory import MemoryBackend, MemoryLauncher
    from board_outbox.model.board import Card
    from board_outbox.model.errors import LaunchFailed
    from board_outbox.model.subscriptions import Subscription
    from board_outbox.service.config import load_config
    from board_outbox.service.runtime import Service

    server = client = None
    store: dict[str, Any] = {}
    if backend == "memory":
        memory = MemoryBackend()
        stores, launcher = memory.stores(), memory.launcher
    else:
        from pymongo import AsyncMongoClient

        from board_outbox.adapters.mongo import ensure_schema, mongo_stores
        from board_outbox.service.wireserver import WireServer

        server = WireServer().start()
        client = AsyncMongoClient(server.uri, tz_aware=True)
        db = client["slow_tenant"]
        await ensure_schema(db)
        launcher = MemoryLauncher()
        stores = mongo_stores(db, launcher, change_feed=True)
        store = {"backend": "mongo", "uri": server.uri, "database": "slow_tenant"}
    try:
        for t in ("slow", *FAST):
            await stores.subs.put(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="bot"))
            await stores.cards.put(Card(tenant_id=t, card_id="c"))
        inserted: dict[tuple[str, int], float] = {}
        waited: dict[tuple[str, int], float] = {}
        inner = launcher.launch

        async def launch(req: Any) -> str:
            if req.tenant_id == "slow":
                await anyio.sleep(min(slow_seconds, timeout))
                if slow_seconds > timeout:
                    raise LaunchFailed(f"the runner did not answer within {timeout:g}s")
            else:
                waited.setdefault((req.tenant_id, req.seq),
                                  time.monotonic() - inserted[(req.tenant_id, req.seq)])
            return await inner(req)

        launcher.launch = launch  # type: ignore[method-assign]
        config = load_config(env={}, worker={"batch_size": 20}, projections=["board-reflect"],
                             tail={"seed": "earliest"}, store=store)
        service = Service(stores, config, rng=random.Random(1))

        async def emit(tenant: str) -> None:
            seq = await stores.events.allocate_seq(tenant)
            inserted[(tenant, seq)] = time.monotonic()
            await stores.events.insert({"tenant_id": tenant, "seq": seq, "type": "card.created",
                                        "card_id": "c", "at": time.time()})

        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            await anyio.sleep(1.0)
            if loaded:
                for _ in range(slow_events):
                    await emit("slow")
                await anyio.sleep(0.5)  # the slow tenant's first launch runs
            for t in FAST:
                for _ in range(5):
                    await emit(t)
            with anyio.move_on_after(window):
                while len(waited) < 5 * len(FAST):
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
    finally:
        if client is not None:
            await client.close()
        if server is not None:
            server.close()
    v = sorted(waited.values())
    return {"backend": backend, "timeout_s": timeout, "loaded": loaded,
            "fast_launched": len(v), "fast_expected": 5 * len(FAST), "window_s": window,
            "p50_s": round(v[len(v) // 2], 3) if v else None,
            "p99_s": round(v[-1], 3) if v else None}


def run_case(src: Path, args: argparse.Namespace, backend: str, timeout: float,
             loaded: bool) -> dict[str, Any]:
    """One case in a process of its own, importing ``src``."""
    cmd = [sys.executable, "-m", "benchmarks.slow_tenant", "--case", backend, str(timeout),
           "1" if loaded else "0", "--slow-seconds", str(args.slow_seconds),
           "--slow-events", str(args.slow_events), "--window", str(args.window)]
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{Path(__file__).parent.parent}"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True,
                         timeout=args.window + 120)
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    got["src"] = str(src)
    return got


def _case(r: dict[str, Any]) -> str:
    return f"timeout {r['timeout_s']:g} s" if r["loaded"] else "unloaded"


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    backends = sorted({r["backend"] for r in runs})
    fig, axes = plt.subplots(1, len(backends), figsize=(6 * len(backends), 3.8), squeeze=False)
    for ax, backend in zip(axes[0], backends, strict=True):
        mine = [r for r in runs if r["backend"] == backend]
        labels = [f"{r['label']}\n{_case(r)}" for r in mine]
        ax.bar(range(len(mine)), [r["p99_s"] or r["window_s"] for r in mine],
               color=["#cc6677" if r["label"] == "before" else "#4477aa" for r in mine])
        for i, r in enumerate(mine):
            ax.annotate(f"{r['fast_launched']}/{r['fast_expected']}",
                        (i, r["p99_s"] or r["window_s"]), ha="center", va="bottom", fontsize=8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(mine)), labels, fontsize=7)
        ax.set(title=f"{backend}: fast tenants beside an 8 s bot", ylabel="fast launches' p99 (s)")
    fig.suptitle("insert -> launch of 15 fast rows (goal: p99 beside the slow tenant <= 2x unloaded)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", nargs=3, metavar=("BACKEND", "TIMEOUT", "LOADED"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--only", choices=["memory", "wire"])
    ap.add_argument("--timeouts", default="20,5", help="the launcher's timeouts to run, seconds")
    ap.add_argument("--slow-seconds", type=float, default=8.0)
    ap.add_argument("--slow-events", type=int, default=3)
    ap.add_argument("--window", type=float, default=40.0, help="how long a case waits, seconds")
    ap.add_argument("--baseline", type=Path, help="also run every case from this src/")
    ap.add_argument("--name", default="slow-tenant")
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args()
    if args.case:
        backend, timeout, loaded = args.case
        print(json.dumps(anyio.run(case, backend, float(timeout), loaded == "1",
                                   args.slow_seconds, args.slow_events, args.window)))
        return 0
    if args.plot_only:
        plot(json.loads((RESULTS / f"{args.name}.json").read_text())["runs"],
             RESULTS / f"{args.name}.png")
        return 0
    sources = [("this", SRC)] + ([("before", args.baseline.resolve())] if args.baseline else [])
    runs: list[dict[str, Any]] = []
    for backend in [args.only] if args.only else ["memory", "wire"]:
        cases = [(float(t), True) for t in args.timeouts.split(",")] + [(20.0, False)]
        for timeout, loaded in cases:
            for label, src in sources:
                got = {"label": label, **run_case(src, args, backend, timeout, loaded)}
                runs.append(got)
                print(json.dumps(got), flush=True)
    for r in runs:
        if r["loaded"]:
            base = next((u for u in runs if not u["loaded"] and u["backend"] == r["backend"]
                         and u["label"] == r["label"]), None)
            if base and base["p99_s"] and r["p99_s"] and r["fast_launched"] == r["fast_expected"]:
                r["p99_vs_unloaded"] = round(r["p99_s"] / base["p99_s"], 2)
    write_result(args.name, {"runs": runs, "slow_seconds": args.slow_seconds,
                             "slow_events": args.slow_events})
    plot(runs, RESULTS / f"{args.name}.png")
    print("| backend | code | launcher timeout | fast launched | p50 s | p99 s | p99 vs unloaded |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in runs:
        print(f"| {r['backend']} | {r['label']} | {_case(r)} | "
              f"{r['fast_launched']}/{r['fast_expected']} in {r['window_s']:g} s | {r['p50_s']} | "
              f"{r['p99_s']} | {r.get('p99_vs_unloaded', '')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
