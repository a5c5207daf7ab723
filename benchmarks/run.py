"""Run the board-outbox benchmarks and write JSON results + PNG plots to benchmarks/results/.

    ./dev.sh bench                  # everything, small default size (under 2 minutes here)
    ./dev.sh bench --size full      # larger runs
    ./dev.sh bench --only worker    # one benchmark

Runs on the in-memory backend and on a real MongoDB-wire server: MONGODB_URI when set, else a
throw-away mongod replica set when mongod is on PATH, else SecantusDB's secantusd-py started as a
child process (temp storage). The JSON records which server it was (name, version, address).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import costs, latency, materialize, worker
from benchmarks.common import RESULTS, pyplot, write_result

SIZES: dict[str, dict[str, Any]] = {
    "small": {"events": 10_000, "rows": 10_000, "lat_events": 300, "lat_rate": 200.0,
              "wire_events": 1_000, "wire_batches": [100, 1000], "wire_rows": 500,
              "wire_lat_events": 150, "wire_lat_rate": 20.0, "cost_events": 1_000},
    "full": {"events": 100_000, "rows": 50_000, "lat_events": 2000, "lat_rate": 500.0,
             "wire_events": 10_000, "wire_batches": [100, 1000, 10000], "wire_rows": 5_000,
             "wire_lat_events": 500, "wire_lat_rate": 50.0, "cost_events": 5_000},
}

SERVER: dict[str, str] = {}  # the wire server measured: name, version, address


def log(msg: str) -> None:
    print(msg, flush=True)


async def main_async(args: argparse.Namespace, uri: str | None) -> None:
    size = SIZES[args.size]
    wire = ["mongo"] if uri else []
    only = set(args.only or ["materialize", "worker", "latency", "costs"])
    t0 = time.monotonic()
    meta = {"size": args.size, "wire_server": SERVER}
    if "materialize" in only:
        res = await materialize.run(["memory"], None, size["events"], [100, 1000, 10000],
                                    [1, 10, 100], [1, 100], log)
        if wire:  # the wire server is slow per command: a smaller grid, one run each
            res += await materialize.run(wire, uri, size["wire_events"], size["wire_batches"],
                                         [1, 10], [1], log, repeats=1)
        write_result("materialize", {**meta, "results": res})
        plot_materialize(res)
    if "worker" in only:
        res = await worker.run(["memory"], None, size["rows"], [1, 2, 4], log)
        if wire:
            res += await worker.run(wire, uri, size["wire_rows"], [1, 2, 4], log)
        write_result("worker", {**meta, "results": res})
        plot_worker(res)
    if "latency" in only:
        res = await latency.run(["memory"], None, size["lat_events"], size["lat_rate"],
                                [0.05, 0.25, 1.0], log)
        if wire:
            res += await latency.run(wire, uri, size["wire_lat_events"], size["wire_lat_rate"],
                                     [0.25], log)
        write_result("latency", {**meta, "results": res})
        plot_latency(res)
    if "costs" in only and uri:
        cost = await costs.run(uri, size["cost_events"], 5, 500, log)
        write_result("costs", {**meta, "before": None, "after": cost})
        costs.plot(None, cost)
    log(f"done in {time.monotonic() - t0:.0f}s; results in {RESULTS}")


def plot_materialize(res: list[dict[str, Any]]) -> None:
    plt = pyplot()
    backends = sorted({r["backend"] for r in res})
    tenants = sorted({r["tenants"] for r in res})
    fig, axes = plt.subplots(len(backends), len(tenants), figsize=(6 * len(tenants), 4 * len(backends)),
                             squeeze=False)
    for i, be in enumerate(backends):
        for j, nt in enumerate(tenants):
            ax = axes[i][j]
            if not any(r["backend"] == be and r["tenants"] == nt for r in res):
                ax.set_visible(False)  # the wire grid measures one tenant only
                continue
            for k, ns in enumerate(sorted({r["subs_per_tenant"] for r in res})):
                rows = sorted((r for r in res if r["backend"] == be and r["tenants"] == nt
                               and r["subs_per_tenant"] == ns), key=lambda r: r["batch_size"])
                if not rows:
                    continue
                xs = [r["batch_size"] for r in rows]
                color = f"C{k}"
                ax.plot(xs, [r["ours_events_per_s"] for r in rows], "o-", color=color,
                        label=f"ours, {ns} subs")
                ax.plot(xs, [r["ceiling_events_per_s"] for r in rows], "--", color=color, alpha=0.6,
                        label=f"ceiling (raw bulk write), {ns} subs")
                ax.plot(xs, [r["baseline_events_per_s"] for r in rows], ":", color=color, alpha=0.8,
                        label=f"publish-then-hope, {ns} subs")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("batch size")
            ax.set_ylabel("events / s")
            ax.set_title(f"{be}: {nt} tenant(s)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=6)
    fig.suptitle("materialization throughput vs batch size")
    fig.tight_layout()
    fig.savefig(RESULTS / "materialize.png", dpi=100)
    plt.close(fig)


def plot_worker(res: list[dict[str, Any]]) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, be in enumerate(sorted({r["backend"] for r in res})):
        rows = [r for r in res if r["backend"] == be]
        ax.plot([r["workers"] for r in rows], [r["rows_per_s"] for r in rows], "o-", color=f"C{k}",
                label=be)
    ax.set_xlabel("workers in one replica")
    ax.set_ylabel("rows executed / s (no-op handler)")
    ax.set_title("worker throughput")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "worker.png", dpi=100)
    plt.close(fig)


def plot_latency(res: list[dict[str, Any]]) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k, r in enumerate(res):
        xs = r["done_samples_ms"]
        if not xs:
            continue
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.plot(xs, ys, color=f"C{k}", label=f"{r['backend']}: {r['mode']}")
    ax.set_xscale("log")
    ax.set_xlabel("insert -> done latency (ms)")
    ax.set_ylabel("fraction of rows")
    ax.set_title("latency CDF: change-stream wake vs polling only")
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "latency.png", dpi=100)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--only", action="append",
                    choices=["materialize", "worker", "latency", "costs"])
    ap.add_argument("--memory-only", action="store_true", help="skip the wire server")
    args = ap.parse_args()
    uri = os.environ.get("MONGODB_URI")
    if args.memory_only:
        anyio.run(main_async, args, None)
        return 0
    if uri:
        SERVER.update({"server": "MONGODB_URI", "address": uri.split("@")[-1].split("/")[0]})
        anyio.run(main_async, args, uri)
        return 0
    if shutil.which("mongod"):
        from tests.support.live_mongo import replica_set

        with replica_set() as started:
            SERVER.update({"server": "mongod", "address": started})
            log(f"started a single-node replica set for the benchmarks: {started}")
            anyio.run(main_async, args, started)
        return 0
    from board_outbox.service.wireserver import WireServer, WireServerUnavailable

    try:
        with WireServer() as server:
            SERVER.update(server.info())
            log(f"measuring on {SERVER['server']} {SERVER['server_version']} at {SERVER['address']} "
                "(a child process, temp storage) and on the in-memory backend")
            anyio.run(main_async, args, server.uri)
    except WireServerUnavailable as exc:
        log(f"no wire server ({exc}): measuring the in-memory backend only")
        anyio.run(main_async, args, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
