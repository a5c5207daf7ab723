"""The console's pages at 20,000 tenants on the MongoDB-wire server (issue 30).

A database with ``--tenants`` tenants (a counter, a cursor and a subscription each; three
events each for the tenants behind), of which ``--behind`` are behind their counter and
``--dead`` caught-up ones hold a dead-letter. The console (in this process, on a real socket) is
loaded ``--loads`` times per page -- the overview's first page, its second page, and one
tenant's page -- twice: alone (``board-outbox console``: the overview sorted and cut in the
store) and beside a replica (``run`` with ``[ui] enabled``: the overview cut from the replica's
own status). In between, three metrics refreshes of that replica (``Service.refresh_status``,
run every ``metrics_interval_seconds``: every tenant, the first events through ``NextEvents``).

Run (``MONGODB_URI`` for a real replica set, else ``secantusd-py`` as a child process)::

    .venv/bin/python -m benchmarks.console_pages [--tenants 20000] [--behind 500 3000 20000]

Result: ``results/console-pages.json``. Before issue 30 the overview at 20,000 tenants took
54.6 s and a tenant page 52.0 s (the per-tenant status of every tenant on every page).
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

import anyio
import httpx
from pymongo import MongoClient

from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.adapters.mongo import ensure_schema, mongo_stores
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.service.wireserver import WireServer
from board_outbox.surface.console import build_console
from board_outbox.surface.http import serve_app
from board_outbox.surface.http.app import build_app

from .common import mongo_uri, percentiles, write_result

CHUNK = 5000


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


async def _pages(app: Any, loads: int, tenant: str, label: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with serve_app(app, "127.0.0.1", 0, setting="ui.port") as server, \
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=300) as http:
        for name, path in (("overview", "/ui/"), ("overview_page_2", "/ui/?page=2"),
                           ("tenant_page", f"/ui/tenants/{tenant}")):
            times = []
            for _ in range(loads):
                t0 = time.perf_counter()
                r = await http.get(path)
                times.append(time.perf_counter() - t0)
                assert r.status_code == 200, (path, r.status_code, r.text[:200])
            out[name] = {k: round(v, 4) if isinstance(v, float) else v
                         for k, v in percentiles(times).items()}
            print(f"  {label:10s} {name:16s} p50 {out[name]['p50']:.3f}s  "
                  f"max {out[name]['max']:.3f}s", flush=True)
    return out


async def measure(uri: str, database: str, loads: int, tenant: str) -> dict[str, Any]:
    from pymongo import AsyncMongoClient

    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, tz_aware=True)
    try:
        db = client[database]
        await ensure_schema(db)
        stores = mongo_stores(db, MemoryLauncher())
        cfg = load_config(env={})
        # alone (`board-outbox console`): the page sorted and cut in the store
        out: dict[str, Any] = {"alone": await _pages(build_app([], ui=build_console(stores, cfg)),
                                                     loads, tenant, "alone")}
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
        out["beside_replica"] = await _pages(
            build_app([], ui=build_console(stores, cfg, service)), loads, tenant, "replica")
        return out
    finally:
        await client.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tenants", type=int, default=20_000)
    ap.add_argument("--behind", type=int, nargs="+", default=[500, 3000, 20_000])
    ap.add_argument("--dead", type=int, default=100)
    ap.add_argument("--loads", type=int, default=5)
    args = ap.parse_args()
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
            res = anyio.run(measure, uri, name, args.loads, "t00001")
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
    print(json.dumps(runs, indent=1))
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
