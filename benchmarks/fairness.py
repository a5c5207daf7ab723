"""Fairness across tenants (F1): one noisy tenant's burst against 19 quiet tenants.

20 tenants, one matching subscription each, the default projection on (a launch row and a
projection row per event). The 19 quiet tenants trickle events (round-robin, at ``--quiet-rate``
events/s in all) for two phases of ``--seconds`` each:

- **without** the burst: only the trickle;
- **with** the burst: at the start of the phase the noisy tenant inserts ``--burst`` events at
  once, and the trickle goes on.

On the wire a third phase, **after** the burst (its events and rows are all there, done), is the
control: the same trickle against collections of the same size without the burst's work, i.e.
what the server's per-query cost at that size gives (SecantusDB scans; mongod's indexes do not).

Reported per phase: the quiet tenants' insert -> done p50/p95/p99 of their launch rows (event
insert wall time -> the row's ``updated_at`` when done). In the burst phase only quiet events
inserted while the burst still had rows left undone count (after that there is no burst to be
fair against). Goal: quiet p99 with the burst <= 2x without.

Two backends: the memory twins (one in-process ``Service``) and the wire (one ``board-outbox run``
process against SecantusDB, started here, as in ``replicas.py``).

Run: ``.venv/bin/python -m benchmarks.fairness`` (``--only memory|wire``, ``--burst``,
``--wire-burst``; ``--plot-only`` re-draws the PNG from the JSON). A baseline: ``PYTHONPATH=
OTHER/src .venv/bin/python -m benchmarks.fairness --src OTHER/src --name fairness-baseline``.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service

from .common import RESULTS, percentiles, write_result

NOISY = "t00"
QUIET = [f"t{i:02d}" for i in range(1, 20)]


def _ms(values: list[float]) -> dict[str, float]:
    return {k: round(v, 1) for k, v in percentiles(values).items()}


def summarize(name: str, phases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"backend": name}
    for phase, got in phases.items():
        out[phase] = {"quiet_insert_to_done_ms": _ms(got["lat"]), **got.get("extra", {})}
    wo = out["without_burst"]["quiet_insert_to_done_ms"].get("p99")
    wi = out["with_burst"]["quiet_insert_to_done_ms"].get("p99")
    if wo and wi:
        out["p99_ratio"] = round(wi / wo, 2)
    after = out.get("after_burst", {}).get("quiet_insert_to_done_ms", {}).get("p99")
    if after and wi:
        out["p99_ratio_to_after"] = round(wi / after, 2)
    return out


# --- the memory twins -------------------------------------------------------------------------


async def memory_run(burst: int, seconds: float, quiet_rate: float) -> dict[str, Any]:
    backend = MemoryBackend()
    for t in [NOISY, *QUIET]:
        await backend.subs.put(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="bot",
                                            rule=MatchRule(event_types=("card.created",))))
        await backend.board.put(Card(tenant_id=t, card_id="c", title="x", column="inbox"))
    cfg = load_config(env={}, tail={"seed": "earliest"}, membership={"enabled": False})
    service = Service(backend.stores(), cfg, rng=random.Random(1))
    inserted: dict[tuple[str, int], float] = {}

    async def emit(tenant: str) -> None:
        seq = await backend.events.allocate_seq(tenant)
        inserted[(tenant, seq)] = time.time()
        await backend.events.insert({"tenant_id": tenant, "seq": seq, "type": "card.created",
                                     "card_id": "c", "at": time.time()})

    async def trickle(until: float) -> list[tuple[str, int]]:
        keys: list[tuple[str, int]] = []
        k = 0
        start = time.time()
        while time.time() < until:
            t = QUIET[k % len(QUIET)]
            await emit(t)
            keys.append((t, await backend.events.allocated_seq(t)))
            k += 1
            if (pause := start + k / quiet_rate - time.time()) > 0:
                await anyio.sleep(pause)
        return keys

    def done_at() -> dict[tuple[str, int], float]:
        return {(d["tenant_id"], d["seq"]): float(d["updated_at"])
                for d in backend.outbox.all_docs()
                if d.get("kind") == "launch" and d.get("state") == "done"}

    async def drained(n_rows: int) -> None:
        with anyio.fail_after(600):
            while sum(1 for d in backend.outbox.all_docs() if d.get("state") == "done") < n_rows:
                await anyio.sleep(0.05)

    phases: dict[str, dict[str, Any]] = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await anyio.sleep(0.5)
        quiet = await trickle(time.time() + seconds)
        await drained(2 * len(inserted))
        done = done_at()
        phases["without_burst"] = {"lat": [(done[k] - inserted[k]) * 1000 for k in quiet]}

        t0 = time.time()
        noisy_keys = []
        first = await backend.events.allocated_seq(NOISY) + 1
        for seq in range(first, first + burst):  # at once: no other task runs meanwhile
            backend.events.insert_now({"tenant_id": NOISY, "seq": seq, "type": "card.created",
                                       "card_id": "c", "at": t0})
            inserted[(NOISY, seq)] = t0
            noisy_keys.append((NOISY, seq))
        burst_inserted = time.time() - t0
        quiet = await trickle(t0 + seconds)
        await drained(2 * len(inserted))
        done = done_at()
        burst_over = max(done[k] for k in noisy_keys)
        during = [k for k in quiet if inserted[k] <= burst_over]
        phases["with_burst"] = {
            "lat": [(done[k] - inserted[k]) * 1000 for k in during],
            "extra": {"burst_events": burst, "burst_insert_s": round(burst_inserted, 2),
                      "burst_done_after_s": round(burst_over - t0, 2),
                      "noisy_insert_to_done_ms": _ms([(done[k] - inserted[k]) * 1000
                                                      for k in noisy_keys])}}
        service.stop()
    return summarize("memory", phases)


# --- the wire ---------------------------------------------------------------------------------


def wire_run(burst: int, seconds: float, quiet_rate: float) -> dict[str, Any]:
    from board_outbox.service.wireserver import WireServer

    from .common import stop
    from .replicas import Bench, spawn, wait_members

    server = WireServer().start()
    db = f"bench_fair_{int(time.time())}"
    b = Bench(server.uri, db)
    try:
        names = b.seed(20)  # t0000..t0019, one subscription and 20 cards each
        noisy, quiet_names = names[0], names[1:]
        with tempfile.TemporaryDirectory() as d:
            procs = [spawn(server.uri, db, 0, Path(d))]
            try:
                wait_members(b, 1)
                inserted: dict[tuple[str, int], float] = {}

                def trickle(until: float) -> list[tuple[str, int]]:
                    keys = []
                    k = 0
                    start = time.time()
                    while time.time() < until:
                        t = quiet_names[k % len(quiet_names)]
                        seq, at = b.emit(t, f"c{k % 20}")
                        inserted[(t, seq)] = at
                        keys.append((t, seq))
                        k += 1
                        if (pause := start + k / quiet_rate - time.time()) > 0:
                            time.sleep(pause)
                    return keys

                def drained(timeout: float = 1800) -> None:
                    end = time.time() + timeout
                    while b.done_rows() < 2 * len(inserted) and time.time() < end:
                        time.sleep(0.5)

                mat: dict[tuple[str, int], float] = {}

                def done_at() -> dict[tuple[str, int], float]:
                    out = {}
                    for x in b.db["trigger_effects"].find(
                            {"kind": "launch", "state": "done"},
                            {"tenant_id": 1, "seq": 1, "updated_at": 1, "materialized_at": 1}):
                        key = (x["tenant_id"], x["seq"])
                        out[key] = float(x["updated_at"])
                        mat[key] = float(x["materialized_at"])
                    return out

                def split(keys: list[tuple[str, int]]) -> dict[str, Any]:
                    return {"quiet_insert_to_materialized_ms":
                            _ms([(mat[k] - inserted[k]) * 1000 for k in keys if k in mat])}

                phases: dict[str, dict[str, Any]] = {}
                time.sleep(2)
                quiet = trickle(time.time() + seconds)
                drained()
                done = done_at()
                phases["without_burst"] = {"lat": [(done[k] - inserted[k]) * 1000
                                                   for k in quiet if k in done],
                                           "extra": split(quiet)}

                t0 = time.time()
                # the burst: the counter moved once, then the events inserted in one bulk write
                top = b.db["board_event_counters"].find_one_and_update(
                    {"_id": noisy}, {"$inc": {"seq": burst}}, upsert=True,
                    return_document=True)["seq"]
                first = top - burst + 1
                b.db["board_events"].insert_many([
                    {"tenant_id": noisy, "seq": s, "type": "card.created", "card_id": "c0",
                     "at": t0} for s in range(first, top + 1)])
                noisy_keys = [(noisy, s) for s in range(first, top + 1)]
                for k in noisy_keys:
                    inserted[k] = t0
                burst_inserted = time.time() - t0
                quiet = trickle(t0 + seconds)
                drained()
                done = done_at()
                burst_over = max(done.get(k, 0.0) for k in noisy_keys)
                during = [k for k in quiet if inserted[k] <= burst_over and k in done]
                phases["with_burst"] = {
                    "lat": [(done[k] - inserted[k]) * 1000 for k in during],
                    "extra": {"burst_events": burst, "burst_insert_s": round(burst_inserted, 2),
                              "burst_done_after_s": round(burst_over - t0, 2),
                              **split(during),
                              "noisy_insert_to_done_ms": _ms([(done[k] - t0) * 1000
                                                              for k in noisy_keys if k in done])}}
                # the control: the same collections (the burst's events and rows are there, done)
                # without the burst's work: what the server's per-query cost at that size gives
                quiet = trickle(time.time() + seconds)
                drained()
                done = done_at()
                phases["after_burst"] = {"lat": [(done[k] - inserted[k]) * 1000
                                                 for k in quiet if k in done],
                                         "extra": split(quiet)}
            finally:
                stop(procs, 20)
    finally:
        b.client.drop_database(db)
        b.client.close()
        server.close()
    return summarize("wire (SecantusDB)", phases)


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(5.5 * len(runs), 3.8), squeeze=False)
    for ax, run in zip(axes[0], runs, strict=True):
        labels = ["p50", "p95", "p99"]
        xs = range(len(labels))
        # the after-burst control is in the JSON, not drawn (see benchmarks/README.md)
        phases = [p for p in ("without_burst", "with_burst") if p in run]
        colors = {"without_burst": "#4477aa", "with_burst": "#cc6677"}
        width = 0.8 / len(phases)
        for j, phase in enumerate(phases):
            got = run[phase]["quiet_insert_to_done_ms"]
            ax.bar([x - 0.4 + width * (j + 0.5) for x in xs], [got.get(k, 0) for k in labels],
                   width=width, color=colors[phase], label=phase.replace("_", " "))
        ax.set_yscale("log")
        ax.set_xticks(list(xs), labels)
        extra = run["with_burst"]
        ax.set(title=f"{run['backend']}: burst of {extra.get('burst_events')} "
                     f"(p99 ratio {run.get('p99_ratio', '?')})",
               ylabel="quiet tenants' insert -> done (ms)")
        ax.legend()
    fig.suptitle("19 quiet tenants trickling, one noisy tenant's burst (goal: p99 ratio <= 2)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["memory", "wire"])
    ap.add_argument("--burst", type=int, default=10_000, help="burst size on the memory twins")
    ap.add_argument("--wire-burst", type=int, default=10_000, help="burst size on the wire")
    ap.add_argument("--seconds", type=float, default=10.0, help="each phase, memory twins")
    ap.add_argument("--wire-seconds", type=float, default=40.0, help="each phase, on the wire")
    ap.add_argument("--quiet-rate", type=float, default=38.0, help="quiet events/s, memory")
    ap.add_argument("--wire-quiet-rate", type=float, default=4.0, help="quiet events/s, wire")
    ap.add_argument("--name", default="fairness")
    ap.add_argument("--src", help="run the wire replica from this src/ (a baseline checkout; for "
                                  "the memory twins set PYTHONPATH to it)")
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args()
    path = RESULTS / f"{args.name}.json"
    if args.src:
        from . import replicas

        replicas.SRC = Path(args.src).resolve()
    if args.plot_only:
        plot(json.loads(path.read_text())["runs"], RESULTS / f"{args.name}.png")
        return 0
    runs: list[dict[str, Any]] = []
    if args.only in (None, "memory"):
        runs.append(anyio.run(memory_run, args.burst, args.seconds, args.quiet_rate))
        print(json.dumps(runs[-1]), flush=True)
    if args.only in (None, "wire"):
        runs.append(wire_run(args.wire_burst, args.wire_seconds, args.wire_quiet_rate))
        print(json.dumps(runs[-1]), flush=True)
    write_result(args.name, {"runs": runs, "setup": vars(args)})
    plot(runs, RESULTS / f"{args.name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
