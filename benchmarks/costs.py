"""Our CPU per event on the production path, next to the bare-driver floor measured in the same
run (SPEC W4).

CPU is this process's CPU time (``time.process_time``: our code plus pymongo's encoding and
decoding); the store and the bot runner are other processes, so their CPU is excluded by
construction. Store commands are the server's own counters (``serverStatus`` ``opcounters``):
command monitoring on our client would cost CPU the floor's bare client does not pay (for a
bulk write it builds the whole command again for the listener).

The production path:
- telemetry ON: an SDK ``TracerProvider`` with a ``BatchSpanProcessor`` and an SDK
  ``MeterProvider`` with a ``PeriodicExportingMetricReader``, as ``service/telemetry.py`` sets
  them up, exporting to in-process exporters that drop what they get;
- materialize: ``Tail.drain_all`` with one launch subscription per tenant (every event matches)
  and the default projection (``board-reflect``): two rows per event;
- execute: ``EffectWorker.tick_any`` (the cross-tenant claim the service runs), default
  ``WorkerSettings``, ``Metrics`` on, launches over HTTP (``HttpLauncher``) to a local bot runner
  (a separate process on 127.0.0.1, answering 200 at once). Launch rows and projection rows are
  executed on two boards of their own, so each kind's CPU per row is its own.

The floor, same run, same server, a bare ``AsyncMongoClient`` (no listeners, nothing of ours):
- ``find_one``: one ``find_one({"_id": ...})`` -- the unit the goals are stated in;
- ``materialize``: the command mix the tail sends per batch (read the events after the cursor,
  the batch's cards in one ``$in``, one unordered bulk of ``$setOnInsert`` upserts of the very
  row documents the tail wrote, the cursor CAS), on a fresh database with the same events and
  cards: what a driver loop with the documents already in hand costs.

Components in the same run, per row: one HTTP launch (``HttpLauncher`` alone), ``Metrics`` per
done row, and the tail's row building (match + rows + span event) per row.

    .venv/bin/python -m benchmarks.costs [--events 1000] [--baseline REV]

``--baseline REV`` measures the same workload with the source of git revision ``REV`` in a child
process against the same server, right after this one ("before" vs "after").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import anyio

from benchmarks.costs_probes import event_docs
from benchmarks.costs_workloads import Run
from board_outbox.engine.work.worker import WorkerSettings

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


async def run(uri: str, events: int = 1000, tenants: int = 5, batch: int = 500,
              log: Any = print, repeats: int = 5, mat_events: int = 5000) -> dict[str, Any]:
    """Materialize, its floor and the find_one floor run ``repeats`` times, interleaved; the
    best of each is reported (the machine is shared: other jobs' noise only ever adds CPU, and
    every figure is taken the same way, so the ratios compare like with like). Materialize
    runs on ``mat_events`` events (cheap per event: it needs many to rise above the noise),
    execution on ``events``."""
    from benchmarks.common import bot_runner

    r = Run(uri, tenants, events, batch, log)
    try:
        docs = event_docs(r.tenants, events, seed=3)
        mat_docs = event_docs(r.tenants, mat_events, seed=4)
        with bot_runner() as url:
            finds, mats, floors = [], [], []
            for _ in range(repeats):
                finds.append(await r.floor_find_one())
                mats.append(await r.materialize(mat_docs))
                floors.append(await r.floor_materialize(mat_docs, mats[-1]["_rows"]))
            find_one = min(finds)
            mat_floor = min(floors)
            mat = min(mats, key=lambda m: m["cpu_us_per_event"])
            rows = mat.pop("_rows")
            for m in mats:
                m.pop("_rows", None)
            mat["runs_cpu_us_per_event"] = [m["cpu_us_per_event"] for m in mats]
            launch = await r.execute("launch", docs, url)
            proj = await r.execute("projection", docs, url)
            launch_alone = min([await r.launch_alone(url) for _ in range(repeats)])
        metrics_per_row = r.metrics_alone(rows)
        build_per_row = r.build_rows_alone(rows)
    finally:
        await r.close()
    per_event = (mat["cpu_us_per_event"] + launch["cpu_us_per_row"] + proj["cpu_us_per_row"])
    out = {
        "events": events, "materialize_events": mat_events, "tenants": tenants, "tail_batch": batch,
        "worker_batch": WorkerSettings().batch_size,
        "repeats": repeats,
        "floor": {"find_one_cpu_us": find_one, "materialize_cpu_us_per_event": mat_floor,
                  "runs_find_one_cpu_us": finds, "runs_materialize_cpu_us_per_event": floors},
        "materialize": mat, "launch_row": launch, "projection_row": proj,
        "components_us_per_row": {
            "materialize (per event, 2 rows)": mat["cpu_us_per_event"],
            "materialize floor (per event)": mat_floor,
            "launch row (claim, launch, mark, telemetry)": launch["cpu_us_per_row"],
            "  HTTP launch alone": launch_alone,
            "  metrics per done row": metrics_per_row,
            "projection row": proj["cpu_us_per_row"],
            "tail row building (match, rows, span event)": build_per_row,
        },
        "service_cpu_us_per_event": per_event,
        "ratio_event_to_find_one": per_event / find_one,
        "ratio_materialize_to_floor": mat["cpu_us_per_event"] / mat_floor,
    }
    log(f"costs: find_one {find_one:.0f} µs | materialize {mat['cpu_us_per_event']:.0f} µs/event "
        f"(floor {mat_floor:.0f}, {out['ratio_materialize_to_floor']:.2f}x) | launch row "
        f"{launch['cpu_us_per_row']:.0f} µs | projection row {proj['cpu_us_per_row']:.0f} µs | "
        f"per event {per_event:.0f} µs = {out['ratio_event_to_find_one']:.2f}x find_one")
    return out


# --- before / after -----------------------------------------------------------------------------


def baseline(rev: str, uri: str, args: argparse.Namespace) -> dict[str, Any]:
    """The same workload on ``rev``'s source, in a child process, against the same server."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "src.tar"
        subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), rev, "src",
                        "projections"], check=True)
        with tarfile.open(archive) as tf:
            tf.extractall(tmp, filter="data")
        out = Path(tmp) / "result.json"
        env = {**os.environ, "PYTHONPATH": f"{tmp}/src:{tmp}/projections:{ROOT}"}
        subprocess.run([sys.executable, "-m", "benchmarks.costs", "--uri", uri, "--json-out",
                        str(out), "--events", str(args.events), "--tenants", str(args.tenants),
                        "--repeats", str(args.repeats), "--mat-events", str(args.mat_events),
                        "--no-sniffio"], check=True, env=env, cwd=tmp)
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def plot(before: dict[str, Any] | None, after: dict[str, Any]) -> None:
    from benchmarks.common import pyplot

    plt = pyplot()
    comps = list(after["components_us_per_row"])
    fig, ax = plt.subplots(figsize=(9, 4.8))
    ys = range(len(comps))
    if before is not None:
        ax.barh([y + 0.2 for y in ys], [before["components_us_per_row"].get(c, 0) for c in comps],
                height=0.4, label="before", color="C3")
    ax.barh([y - 0.2 for y in ys], [after["components_us_per_row"][c] for c in comps], height=0.4,
            label="after", color="tab:blue")
    ax.axvline(after["floor"]["find_one_cpu_us"], color="k", ls="--", lw=1,
               label=f"one bare find_one ({after['floor']['find_one_cpu_us']:.0f} µs)")
    ax.set_yticks(list(ys), comps, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("our CPU, µs per row (materialize: per event)")
    title = f"CPU per event: {after['ratio_event_to_find_one']:.1f}x one bare find_one"
    if before is not None:
        title = (f"CPU per event: {before['ratio_event_to_find_one']:.1f}x -> "
                 f"{after['ratio_event_to_find_one']:.1f}x one bare find_one (same server)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(RESULTS / "costs.png", dpi=100)
    plt.close(fig)


def _log(msg: str) -> None:
    print(msg, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1000, help="events executed")
    ap.add_argument("--mat-events", type=int, default=5000, help="events materialized")
    ap.add_argument("--tenants", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--uri", help="a running server (default: MONGODB_URI, else a wire server)")
    ap.add_argument("--baseline", metavar="REV", help="also measure git revision REV (before)")
    ap.add_argument("--json-out", help=argparse.SUPPRESS)
    ap.add_argument("--no-sniffio", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.no_sniffio:
        from benchmarks.common import NoSniffio

        sys.modules.pop("sniffio", None)
        sys.meta_path.insert(0, NoSniffio())
    uri = args.uri or os.environ.get("MONGODB_URI")
    if args.json_out:  # a baseline child: measure, write, done
        assert uri
        res = anyio.run(run, uri, args.events, args.tenants, 500, _log, args.repeats,
                        args.mat_events)
        Path(args.json_out).write_text(json.dumps(res))
        return 0
    from benchmarks.common import write_result
    from board_outbox.service.wireserver import WireServer

    def measure(uri: str, server: dict[str, Any]) -> None:
        after = anyio.run(run, uri, args.events, args.tenants, 500, _log, args.repeats,
                          args.mat_events)
        write_result("costs", {"wire_server": server, "baseline": None, "before": None,
                               "after": after})
        before = baseline(args.baseline, uri, args) if args.baseline else None
        write_result("costs", {"wire_server": server, "baseline": args.baseline,
                               "before": before, "after": after})
        plot(before, after)

    if uri:
        measure(uri, {"server": "given", "address": uri.split("@")[-1].split("/")[0]})
    else:
        with WireServer() as server:
            measure(server.uri, server.info())
    return 0


if __name__ == "__main__":
    sys.exit(main())
