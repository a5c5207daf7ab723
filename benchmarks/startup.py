"""Start-up with many idle tenants on the MongoDB-wire server.

20,000 tenants with a counter at seq 0 and no cursor (new, idle), and one live tenant whose
event is already in the log (its tenant id sorts after every idle one). Measured: the wall time
from spawning ``board-outbox run`` to that event's launch row being done, and the wall time of
one ``board-outbox status --json`` over the same database. ``--src`` runs a baseline checkout's
``src/`` (before: the first poll pass seeded the idle tenants one by one, several round trips
each, before it reached the live one; status read several documents per tenant).

Run: ``.venv/bin/python -m benchmarks.startup [--tenants 20000] [--src BASELINE/src --name X]``;
``--plot startup-before startup-after`` draws ``results/startup.png`` from two runs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from board_outbox.service.wireserver import WireServer

from .common import RESULTS, write_result

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seed(db: Any, tenants: int) -> None:
    counters = [{"_id": f"idle{i:05d}", "seq": 0} for i in range(tenants)]
    for i in range(0, len(counters), 5000):
        db["board_event_counters"].insert_many(counters[i:i + 5000])
    db["trigger_subscriptions"].insert_one({"_id": "live.s", "sub_id": "live.s",
                                            "tenant_id": "live", "bot": "bot",
                                            "rule": {"event_types": ["card.created"]}})
    db["board_cards"].insert_one({"_id": "live/c", "tenant_id": "live", "card_id": "c",
                                  "title": "x", "column": "inbox"})
    db["board_event_counters"].insert_one({"_id": "live", "seq": 1})
    db["board_events"].insert_one({"tenant_id": "live", "seq": 1, "type": "card.created",
                                   "card_id": "c", "at": time.time()})


def config(tmp: Path, uri: str, db: str) -> Path:
    cfg = tmp / "c.toml"
    cfg.write_text(
        f'[store]\nbackend = "mongo"\nuri = "{uri}"\ndatabase = "{db}"\n'
        f'[service]\nlog_level = "WARNING"\nhttp_port = {_free_port()}\n'
        '[tail]\nseed = "earliest"\n[launcher]\nkind = "log"\n')
    return cfg


def one_run(server: WireServer, tenants: int, src: Path, timeout: float) -> dict[str, Any]:
    name = f"bench_startup_{tenants}_{int(time.time())}"
    client: MongoClient[dict[str, Any]] = MongoClient(server.uri)
    db = client[name]
    env = {**os.environ, "PYTHONPATH": str(src)}
    # no machine paths in the results: which code ran, not where it lay
    out: dict[str, Any] = {"tenants": tenants,
                           "src": "this checkout" if src == ROOT / "src" else "--src baseline"}
    try:
        seed(db, tenants)
        with tempfile.TemporaryDirectory() as d:
            cfg = config(Path(d), server.uri, name)
            log = (Path(d) / "run.log").open("wb")
            t0 = time.perf_counter()
            proc = subprocess.Popen([sys.executable, "-m", "board_outbox", "run", "--config",
                                     str(cfg)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                    stderr=log)
            try:
                first = None
                while time.perf_counter() - t0 < timeout:
                    if db["trigger_effects"].count_documents(
                            {"tenant_id": "live", "kind": "launch", "state": "done"}):
                        first = time.perf_counter() - t0
                        break
                    time.sleep(0.1)
                out["start_to_first_launch_s"] = None if first is None else round(first, 2)
                seeded = db["trigger_cursors"].count_documents({"seq": {"$exists": True}})  # not the epoch
                out["cursors_at_first_launch"] = seeded
            finally:
                proc.terminate()
                proc.wait(30)
                log.close()
            t1 = time.perf_counter()
            st = subprocess.run([sys.executable, "-m", "board_outbox", "status", "--json",
                                 "--config", str(cfg)], cwd=ROOT, env=env,
                                capture_output=True, timeout=timeout)
            out["status_json_s"] = round(time.perf_counter() - t1, 2)
            out["status_exit"] = st.returncode
    finally:
        client.drop_database(name)
        client.close()
    return out


def plot(before: dict[str, Any], after: dict[str, Any], path: Path) -> None:
    """Before/after bars (log scale): start -> first launch and one ``status --json``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, key, title in ((axes[0], "start_to_first_launch_s", "start -> first launch (s)"),
                           (axes[1], "status_json_s", "status --json (s)")):
        values = [before[key], after[key]]
        ax.bar(["before", "after"], values, color=["#cc6677", "#4477aa"])
        ax.set_yscale("log")
        ax.set(title=title)
        for i, v in enumerate(values):
            ax.annotate(f"{v:g}", (i, v), ha="center", va="bottom")
    fig.suptitle(f"{after['tenants']:,} idle tenants + 1 live, MongoDB-wire server (SecantusDB)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tenants", type=int, default=20_000)
    ap.add_argument("--src", help="run from this src/ (e.g. a baseline checkout)")
    ap.add_argument("--name", default="startup", help="result file name")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--plot", nargs=2, metavar=("BEFORE", "AFTER"),
                    help="only draw results/startup.png from two result names")
    args = ap.parse_args()
    if args.plot:
        runs = [json.loads((RESULTS / f"{n}.json").read_text())["run"] for n in args.plot]
        plot(runs[0], runs[1], RESULTS / "startup.png")
        return 0
    src = Path(args.src).resolve() if args.src else ROOT / "src"
    server = WireServer().start()
    try:
        r = one_run(server, args.tenants, src, args.timeout)
    finally:
        server.close()
    print(r, flush=True)
    setup = {**vars(args), "src": bool(args.src)}
    write_result(args.name, {"run": r, "setup": {"server": "secantusd-py (WireServer)", **setup}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
