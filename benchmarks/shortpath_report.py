"""``shortpath.py``'s figures: round trips before the POST from statement logs, the medians over
repeats, the ratios to the floor, the short path's goals, the plot and the printed tables."""

from __future__ import annotations

import bisect
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from .common import pyplot

# (figure name, where it is in a run)
METRICS: dict[str, tuple[str, ...]] = {
    "p50_ms": ("insert_to_launch_ms", "p50"),
    "p95_ms": ("insert_to_launch_ms", "p95"),
    "p99_ms": ("insert_to_launch_ms", "p99"),
    "requests_per_event": ("requests_per_event",),
    "requests_per_event_without_getmores": ("requests_per_event_without_getmores",),
    "getmores_per_event": ("getmores_per_event",),
    "process_cpu_ms_per_event": ("process_cpu_ms_per_event",),
    "process_cpu_ms_per_event_idle_included": ("process_cpu_ms_per_event_idle_included",),
    "server_cpu_ms_per_event": ("server_cpu_ms_per_event",),
    "idle_requests_per_s": ("idle_requests_per_s",),
    "process_idle_cpu_fraction": ("process_idle_cpu_fraction",),
    "seconds": ("seconds",),
}
RATIOS = ("p50_ms", "p99_ms", "requests_per_event", "requests_per_event_without_getmores",
          "process_cpu_ms_per_event", "process_cpu_ms_per_event_idle_included",
          "server_cpu_ms_per_event")
# (goal, case, figure, at most): the short path's goals, each product at one process against the floor
GOALS = (
    ("insert -> launch p50 <= 1.3x the floor", "latency", "p50_ms", 1.3),
    ("insert -> launch p99 <= 1.5x the floor", "latency", "p99_ms", 1.5),
    # requests without the change streams' getMores, as the issue counted them: this server
    # answers every open stream's getMore at any write (mongod: at a matching insert)
    ("store requests per event at a trickle <= 1.3x the floor (without getMores)", "trickle",
     "requests_per_event_without_getmores", 1.3),
    ("4 replicas <= 1.25x one (store requests per event without getMores, trickle)", "trickle",
     "replicas_4_over_1_without_getmores", 1.25),
    ("whole-process CPU per event <= 1.5x the floor's, trickle 5/s", "latency",
     "process_cpu_ms_per_event", 1.5),
    ("whole-process CPU per event <= 1.5x the floor's, trickle 40/s", "trickle",
     "process_cpu_ms_per_event", 1.5),
    ("whole-process CPU per event <= 1.5x the floor's, backlog", "backlog",
     "process_cpu_ms_per_event", 1.5),
)


# --- round trips between an event's insert and its launch ----------------------------------------


def round_trips(paths: list[Path], sent: list[tuple[str, int, float]],
                arrived: dict[tuple[str, int], float]) -> dict[str, Any]:
    """The commands a pipeline started between each event's insert (sent) and its launch's
    arrival at the runner, from its statement logs (``statement_log.py``: start time, command,
    collection, filter shape, round trip). Only events whose window overlaps no other event's
    count. Per event: the commands that completed before the POST arrived (``before_post``),
    those still in flight then (started, not answered: run beside the launch), and the
    change-stream getMores apart (one that completes in the window is the wake)."""
    cmds: list[tuple[float, float, str]] = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            at, name, coll, _n, shape, dur = (line.split("\t") + [""] * 6)[:6]
            start = float(at)
            key = f"{name} {coll} {{{shape}}}".replace(" {}", "")
            cmds.append((start, start + float(dur or 0) / 1e6, key))
    cmds.sort()
    starts = [c[0] for c in cmds]
    windows = sorted((at, arrived[(t, s)]) for t, s, at in sent if (t, s) in arrived)
    before: list[int] = []
    in_flight: list[int] = []
    wakes: list[int] = []
    by_key: Counter[str] = Counter()
    flight_key: Counter[str] = Counter()
    sequences: Counter[tuple[str, ...]] = Counter()
    reach = float("-inf")  # the latest end of the windows before this one
    for i, (lo, hi) in enumerate(windows):
        clean = lo >= reach and (i + 1 == len(windows) or hi <= windows[i + 1][0])
        reach = max(reach, hi)
        if not clean:
            continue
        inside = cmds[bisect.bisect_left(starts, lo):bisect.bisect_left(starts, hi)]
        done = [c for c in inside if not c[2].startswith("getMore") and c[1] <= hi]
        late = [c for c in inside if not c[2].startswith("getMore") and c[1] > hi]
        before.append(len(done))
        in_flight.append(len(late))
        wakes.append(sum(1 for c in cmds[max(0, bisect.bisect_left(starts, lo - 5)):
                                         bisect.bisect_left(starts, hi)]
                         if c[2].startswith("getMore") and lo <= c[1] <= hi))
        by_key.update(c[2] for c in done)
        flight_key.update(c[2] for c in late)
        sequences[tuple(c[2] for c in done)] += 1
    n = len(before)
    if not n:
        return {"events_used": 0, "events": len(sent)}
    return {
        "events_used": n, "events": len(sent),
        "before_post": {"median": statistics.median(before), "mean": round(statistics.fmean(before), 2),
                        "min": min(before), "max": max(before)},
        "in_flight_at_post": {"median": statistics.median(in_flight),
                              "mean": round(statistics.fmean(in_flight), 2)},
        "stream_getmores_answered_in_window": round(statistics.fmean(wakes), 2),
        "before_post_by_command": {k: round(v / n, 2) for k, v in by_key.most_common()},
        "in_flight_by_command": {k: round(v / n, 2) for k, v in flight_key.most_common()},
        "commonest_sequences": [{"events": c, "commands": list(seq)}
                                for seq, c in sequences.most_common(3)],
    }


# --- medians, ratios, goals ----------------------------------------------------------------------


def _get(run: dict[str, Any], path: tuple[str, ...]) -> float | None:
    v: Any = run
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    return float(v) if isinstance(v, int | float) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else round(a / b, 2)


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    runs = doc["runs"]
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for case in dict.fromkeys(r["case"] for r in runs):
        summary[case] = {}
        for label in dict.fromkeys(r["pipeline"] for r in runs if r["case"] == case):
            mine = [r for r in runs if r["case"] == case and r["pipeline"] == label]
            # a run that did not finish within --timeout has no figure per event: left out
            finished = [r for r in mine if r["finished"]]
            figures: dict[str, Any] = {"repeats": len(mine), "finished": len(finished),
                                       "rows_done_unfinished": [r["rows_done"] for r in mine
                                                                if not r["finished"]],
                                       "duplicate_launches": sum(r["duplicate_launches"] for r in mine),
                                       "missing_launches": sum(r["missing_launches"] for r in mine)}
            for name, path in METRICS.items():
                vals = [v for r in finished if (v := _get(r, path)) is not None]
                if vals:
                    figures[name] = {"median": round(statistics.median(vals), 3),
                                     "min": round(min(vals), 3), "max": round(max(vals), 3)}
            summary[case][label] = figures
    ratios: dict[str, dict[str, dict[str, float | None]]] = {}
    for case, by in summary.items():
        floor = by.get("floor", {})
        inserts = by.get("inserts", {}).get("server_cpu_ms_per_event", {}).get("median")
        ratios[case] = {}
        for label, figs in by.items():
            if label in ("floor", "inserts"):
                continue
            r = {m: _ratio(figs.get(m, {}).get("median"), floor.get(m, {}).get("median"))
                 for m in RATIOS}
            srv, fsrv = (figs.get("server_cpu_ms_per_event", {}).get("median"),
                         floor.get("server_cpu_ms_per_event", {}).get("median"))
            if inserts is not None and srv is not None and fsrv is not None:
                r["server_cpu_less_inserts"] = _ratio(srv - inserts, fsrv - inserts)
            if label.endswith("x4") and label[:-1] + "1" in by:
                one = by[label[:-1] + "1"]
                r["replicas_4_over_1"] = _ratio(figs.get("requests_per_event", {}).get("median"),
                                                one.get("requests_per_event", {}).get("median"))
                r["replicas_4_over_1_without_getmores"] = _ratio(
                    figs.get("requests_per_event_without_getmores", {}).get("median"),
                    one.get("requests_per_event_without_getmores", {}).get("median"))
            ratios[case][label] = r
    goals = []
    for label in dict.fromkeys(lbl for by in ratios.values() for lbl in by if lbl.endswith("x1")):
        for text, case, figure, limit in GOALS:
            at = label[:-1] + "4" if figure.startswith("replicas_4_over_1") else label
            value = ratios.get(case, {}).get(at, {}).get(figure)
            if value is not None:
                goals.append({"pipeline": label, "goal": text, "case": case, "ratio": value,
                              "at_most": limit, "met": value <= limit})
    trips = {r["pipeline"]: r["round_trips"] for r in doc.get("instrumented_runs", [])
             if "round_trips" in r}
    profiles = {f"{r['pipeline']} {r['case']}": r["profile"].get("file") or r["profile"].get("error")
                for r in doc.get("instrumented_runs", []) if "profile" in r}
    return {"summary": summary, "ratios": ratios, "goals": goals, "round_trips": trips,
            "profiles": profiles}


# --- the plot and the printed tables --------------------------------------------------------------


def plot(doc: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    summary = doc["summary"]
    cases = list(summary)
    labels = [lbl for lbl in dict.fromkeys(lbl for by in summary.values() for lbl in by)
              if lbl != "inserts"]
    fig, axes = plt.subplots(2, 2, figsize=(14, 8.5))
    width = 0.8 / max(1, len(labels))

    def bars(ax: Any, figure: str, xs: list[str], title: str, inner: str = "") -> None:
        """Medians with the repeats' min-max; ``inner``: a part of it drawn solid, the rest
        pale."""
        for j, label in enumerate(labels):
            med, lo, hi, part = [], [], [], []
            for case in xs:
                figs = summary.get(case, {}).get(label, {})
                f = figs.get(figure, {})
                m = f.get("median", 0.0)
                med.append(m)
                lo.append(m - f.get("min", m))
                hi.append(f.get("max", m) - m)
                part.append(figs.get(inner, {}).get("median", 0.0) if inner else m)
            x = [i + j * width for i in range(len(xs))]
            ax.bar(x, med, width, yerr=[lo, hi], capsize=2, color=f"C{j}",
                   alpha=0.35 if inner else 1.0, label=None if inner else label)
            if inner:
                ax.bar(x, part, width, color=f"C{j}", label=label)
        ax.set_xticks([i + width * (len(labels) - 1) / 2 for i in range(len(xs))])
        ax.set_xticklabels(xs)
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)

    lat = [c for c in cases if c != "backlog"]
    bars(axes[0][0], "p50_ms", lat, "insert -> launch received, p50 (ms; bars: min-max of repeats)")
    bars(axes[0][1], "p99_ms", lat, "insert -> launch received, p99 (ms)")
    bars(axes[1][0], "requests_per_event", cases, "store requests per event (server counter; "
         "pale: the change streams' getMores)", inner="requests_per_event_without_getmores")
    bars(axes[1][1], "process_cpu_ms_per_event", cases,
         "whole-process CPU ms per event (idle rate subtracted)")
    axes[0][0].legend(fontsize=8)
    met = [g for g in doc.get("goals", []) if g["met"]]
    fig.suptitle(f"the short path vs its bare-driver floor, same server, same run: "
                 f"{len(met)}/{len(doc.get('goals', []))} goals met", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _fmt(f: dict[str, Any] | None) -> str:
    if not f:
        return "-"
    m, lo, hi = f["median"], f["min"], f["max"]
    return f"{m:.2f}" if lo == hi else f"{m:.2f} ({lo:.2f}-{hi:.2f})"


def as_text(doc: dict[str, Any]) -> str:
    cols = ("p50_ms", "p95_ms", "p99_ms", "requests_per_event", "requests_per_event_without_getmores",
            "process_cpu_ms_per_event", "process_cpu_ms_per_event_idle_included",
            "server_cpu_ms_per_event")
    out = []
    for case, by in doc["summary"].items():
        out.append(f"\n== {case} ==  (median of repeats, min-max in brackets)")
        for label, figs in by.items():
            unfinished = "" if not figs["rows_done_unfinished"] else \
                f" | UNFINISHED {len(figs['rows_done_unfinished'])}/{figs['repeats']} runs " \
                f"(rows done: {figs['rows_done_unfinished']})"
            out.append(f"  {label:14} " + " | ".join(f"{c} {_fmt(figs.get(c))}" for c in cols)
                       + unfinished)
        for label, r in doc["ratios"].get(case, {}).items():
            out.append(f"  {label:14} / floor: " + ", ".join(f"{k} {v}" for k, v in r.items()))
    out.append("\n== goals ==")
    for g in doc["goals"]:
        out.append(f"  {'MET ' if g['met'] else 'not '} {g['pipeline']:12} {g['goal']}: "
                   f"{g['ratio']}x")
    out.append("\n== store round trips between the insert and the POST (latency case) ==")
    for label, rt in doc["round_trips"].items():
        if not rt.get("events_used"):
            out.append(f"  {label}: no clean event window")
            continue
        out.append(f"  {label}: {rt['before_post']['median']} before the POST (mean "
                   f"{rt['before_post']['mean']}), {rt['in_flight_at_post']['mean']} in flight "
                   f"at it, stream getMores answered {rt['stream_getmores_answered_in_window']} "
                   f"({rt['events_used']}/{rt['events']} events)")
        for k, v in rt["before_post_by_command"].items():
            out.append(f"      {v:5.2f}  {k}")
    for k, v in doc["profiles"].items():
        out.append(f"  profile {k}: {v}")
    return "\n".join(out)
