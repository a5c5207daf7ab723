"""The console's pages at 20,000 tenants on the MongoDB-wire server.

A database with ``--tenants`` tenants (a counter, a cursor and a subscription each; three
events each for the tenants behind), of which ``--behind`` are behind their counter and
``--dead`` caught-up ones hold a dead-letter. The console (in this process, on a real socket) is
loaded as an operator's browser loads it: ``--rounds`` rounds of the overview's first page, its
second page and one tenant's page, one load every ``--every`` seconds, with the view of who
needs a look aged ``--interval`` seconds (``service.metrics_interval_seconds``), so that views
go stale and are read again during the run. Measured twice: alone (``board-outbox console``: the
view read in the store, one aggregate shared by the loads) and beside a replica (``run`` with
``[ui] enabled``: the view is the replica's own status, sorted once per refresh); in between,
three metrics refreshes of that replica (``Service.refresh_status``). ``--baseline`` measures
the console as it was before too, in the same run: each load computes its own view (alone: the
aggregate sorts and cuts its page in the store; beside a replica: every tenant sorted).

For each page: the wall time of a load (p50, max; the very first load of a console, which has
no view yet, apart), the commands it sent (``CommandListener``), the aggregates that read the
view, and the CPU of this process (the console and the HTTP client) and of the server
(``secantusd-py``'s own, when this script started it) over the run.

Run (``MONGODB_URI`` for a real replica set, else ``secantusd-py`` as a child process)::

    .venv/bin/python -m benchmarks.console_pages [--tenants 20000] [--behind 500 3000 20000]
        [--baseline] [--plot-only]

Result: ``results/console-pages.json`` and ``.png``. Before the pages were cut from counts kept
per tenant, the overview at 20,000 tenants took 54.6 s and a tenant page 52.0 s (the per-tenant
status of every tenant on every page).
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
from pymongo import MongoClient, monitoring

from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.adapters.mongo import ensure_schema, mongo_stores
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.service.wireserver import WireServer
from board_outbox.surface.console import build_console
from board_outbox.surface.http import serve_app
from board_outbox.surface.http.app import build_app

from .common import RESULTS, cpu_seconds, mongo_uri, percentiles, pyplot, write_result

CHUNK = 5000
PAGES = (("overview", "/ui/"), ("overview_page_2", "/ui/?page=2"),
         ("tenant_page", "/ui/tenants/{tenant}"))


def seed(db: Any, tenants: int, behind: int, dead: int) -> None:
    """Tenant i: counter 3, cursor 3 (caught up) or 1 (behind, for the first ``behind``)."""
    now = time.time()
    ids = [f"t{i:05d}" for i in range(tenants)]
    for start in range(0, tenants, CHUNK):
        part = ids[start:start + CHUNK]
        db["board_event_counters"].insert_many([{"_id": t, "seq": 3} for t in part])
        db["trigger_cursors"].insert_many(
            [{"_id": t, "seq": 1 if start + k < behind else 3} for k, t in enumerate(part)])
        db["trigger_subscriptions"].insert_many(
            [{"_id": f"{t}.s", "sub_id": f"{t}.s", "tenant_id": t, "bot": "bot",
              "rule": {"event_types": ["card.created"]}} for t in part])
    events = [{"tenant_id": t, "seq": s, "type": "card.created", "card_id": "c",
               "at": now - 120 + s} for t in ids[:behind] for s in (1, 2, 3)]
    for start in range(0, len(events), CHUNK):
        db["board_events"].insert_many(events[start:start + CHUNK])
    failed = [{"row_key": f"{t}/3/sub/{t}.s", "tenant_id": t, "seq": 3, "kind": "launch",
               "sub_id": f"{t}.s", "state": "failed", "attempts": 3, "errors": [],
               "created_at": now - 60, "updated_at": now - 30, "not_before": now - 60}
              for t in ids[behind:behind + dead]]
    if failed:
        db["trigger_effects"].insert_many(failed)


@dataclass
class Commands(monitoring.CommandListener):
    """Every command the console's client sends; ``views``: the aggregates over the counters
    (``StatusStore.attention``: one read of who needs a look)."""

    n: int = 0
    views: int = 0
    by: dict[str, int] = field(default_factory=dict)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.n += 1
        name = f"{event.command_name} {event.command.get(event.command_name)}"
        self.by[name] = self.by.get(name, 0) + 1
        if name == "aggregate board_event_counters":
            self.views += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def _r(v: Any) -> Any:
    return round(v, 4) if isinstance(v, float) else v


async def _pages(app: Any, args: argparse.Namespace, commands: Commands, server_pid: int | None,
                 label: str) -> dict[str, Any]:
    """``args.rounds`` rounds of the three pages, one load every ``args.every`` seconds."""
    times: dict[str, list[float]] = {name: [] for name, _ in PAGES}
    sent: dict[str, list[int]] = {name: [] for name, _ in PAGES}
    views: dict[str, int] = dict.fromkeys(times, 0)
    first: float | None = None
    async with serve_app(app, "127.0.0.1", 0, setting="ui.port") as server, \
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=300) as http:
        n0, v0, cpu0 = commands.n, commands.views, time.process_time()
        srv0, t_run = cpu_seconds(server_pid) if server_pid else 0.0, time.perf_counter()
        for round_ in range(args.rounds):
            for name, path in PAGES:
                n, v = commands.n, commands.views
                t0 = time.perf_counter()
                r = await http.get(path.format(tenant=args.tenant))
                took = time.perf_counter() - t0
                assert r.status_code == 200, (path, r.status_code, r.text[:200])
                if first is None:
                    first = took  # a console's first load: no view yet
                else:
                    times[name].append(took)
                sent[name].append(commands.n - n - (commands.views - v))
                views[name] += commands.views - v
                await anyio.sleep(args.every)
            del round_
        run_seconds = time.perf_counter() - t_run - args.every * args.rounds * len(PAGES)
        out: dict[str, Any] = {
            name: {**{k: _r(v) for k, v in percentiles(times[name]).items()},
                   "commands_per_load": round(sum(sent[name]) / len(sent[name]), 1),
                   "view_reads": views[name]}
            for name, _ in PAGES}
        out["first_load_seconds"] = _r(first)
        out["run"] = {"loads": args.rounds * len(PAGES), "busy_seconds": _r(run_seconds),
                      "commands": commands.n - n0, "view_reads": commands.views - v0,
                      "process_cpu_seconds": _r(time.process_time() - cpu0),
                      "server_cpu_seconds": (_r(cpu_seconds(server_pid) - srv0)
                                             if server_pid else None)}
    for name, _ in PAGES:
        print(f"  {label:16s} {name:16s} p50 {out[name]['p50']:.3f}s  max {out[name]['max']:.3f}s"
              f"  {out[name]['commands_per_load']} commands/load", flush=True)
    print(f"  {label:16s} first load {first:.3f}s; run: {out['run']}", flush=True)
    return out


def _console(stores: Any, cfg: Any, service: Service | None, shared: bool) -> Any:
    ui = build_console(stores, cfg, service)
    ui.state.console.shared = shared
    return build_app([], ui=ui)


async def measure(uri: str, database: str, args: argparse.Namespace,
                  server_pid: int | None) -> dict[str, Any]:
    from pymongo import AsyncMongoClient

    commands = Commands()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, tz_aware=True,
                                                               event_listeners=[commands])
    try:
        db = client[database]
        await ensure_schema(db)
        stores = mongo_stores(db, MemoryLauncher())
        cfg = load_config(env={}, service={"metrics_interval_seconds": args.interval})
        out: dict[str, Any] = {}
        # alone (`board-outbox console`): the view read in the store, shared by the loads
        for shared in ((True, False) if args.baseline else (True,)):
            label = "alone" if shared else "alone_baseline"
            out[label] = await _pages(_console(stores, cfg, None, shared), args, commands,
                                      server_pid, label)
        # beside a replica (`run` with [ui] enabled): its metrics refreshes, then the pages
        service = Service(stores, cfg)
        service.status_enabled = True
        refresh = []
        for _ in range(3):
            t0 = time.perf_counter()
            await service.refresh_status()
            refresh.append(time.perf_counter() - t0)
        out["metrics_refresh"] = {"seconds": [round(x, 3) for x in refresh],
                                  "tenants": len(service.status),
                                  "first_events_read_last": service.next_events.reads,
                                  "budget": service.next_events.budget}
        print(f"  metrics refresh  {[round(x, 3) for x in refresh]}", flush=True)
        for shared in ((True, False) if args.baseline else (True,)):
            label = "beside_replica" if shared else "beside_replica_baseline"
            out[label] = await _pages(_console(stores, cfg, service, shared), args, commands,
                                      server_pid, label)
        return out
    finally:
        await client.close()


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    modes = [m for m in ("alone_baseline", "alone", "beside_replica_baseline", "beside_replica")
             if m in runs[0]]
    fig, axes = plt.subplots(1, len(PAGES), figsize=(13, 4.2), sharey=True)
    width = 0.8 / len(modes)
    for ax, (page, _path) in zip(axes, PAGES, strict=True):
        for i, mode in enumerate(modes):
            xs = [k + i * width for k in range(len(runs))]
            ax.bar(xs, [r[mode][page]["p50"] for r in runs], width, label=f"{mode} p50")
            ax.plot(xs, [r[mode][page]["max"] for r in runs], "k_", ms=9,
                    label="max" if i == 0 else None)
            if page == "overview" and mode == "alone":
                ax.plot(xs, [r[mode]["first_load_seconds"] for r in runs], "rx",
                        label="alone: a console's first load (no view yet)")
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(runs))],
                      [f"{r['behind']:,} behind" for r in runs])
        ax.axhline(1.0, color="k", ls="--", lw=0.8)
        ax.set(title=page.replace("_", " "), ylabel="seconds (log)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, axis="y")
    handles, labels = [], []
    for ax in axes[:1]:
        h, lab = ax.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    fig.legend(handles, [lab.replace("_", " ") for lab in labels], loc="lower center",
               ncol=3, fontsize=8)
    fig.suptitle(f"console pages at {runs[0]['tenants']:,} tenants, wire server, a load every "
                 "second (dashed: the 1 s goal)")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tenants", type=int, default=20_000)
    ap.add_argument("--behind", type=int, nargs="+", default=[500, 3000, 20_000])
    ap.add_argument("--dead", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--every", type=float, default=1.0, help="seconds between loads")
    ap.add_argument("--interval", type=float, default=5.0,
                    help="service.metrics_interval_seconds: the view's age")
    ap.add_argument("--tenant", default="t00001", help="the tenant page's tenant")
    ap.add_argument("--baseline", action="store_true",
                    help="also each load computing its own view (the console before)")
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args()
    if args.plot_only:
        plot(json.loads((RESULTS / "console-pages.json").read_text())["runs"],
             RESULTS / "console-pages.png")
        return 0
    server = None
    uri = mongo_uri()
    if uri is None:
        server = WireServer().start()
        uri = server.uri
    runs = []
    try:
        sync: MongoClient[dict[str, Any]] = MongoClient(uri)
        for behind in args.behind:
            name = f"bench_console_{uuid.uuid4().hex[:8]}"
            t0 = time.perf_counter()
            seed(sync[name], args.tenants, min(behind, args.tenants),
                 min(args.dead, max(0, args.tenants - behind)))
            print(f"{args.tenants} tenants, {behind} behind: seeded in "
                  f"{time.perf_counter() - t0:.1f}s", flush=True)
            res = anyio.run(measure, uri, name, args, server.pid if server else None)
            runs.append({"tenants": args.tenants, "behind": behind,
                         "dead_letter_tenants": min(args.dead, max(0, args.tenants - behind)),
                         **res})
            sync.drop_database(name)
        sync.close()
    finally:
        if server is not None:
            server.stop()
    path = write_result("console-pages", {
        "setup": vars(args), "runs": runs,
        "wire_server": "MONGODB_URI" if server is None else "secantusd-py",
        "before_issue_30": {"overview_seconds": 54.6, "tenant_page_seconds": 52.0,
                            "note": "the issue's black-box figures at 20,000 tenants"}})
    plot(runs, RESULTS / "console-pages.png")
    print(json.dumps(runs, indent=1))
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
