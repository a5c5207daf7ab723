"""What ``trace_overhead.py`` reports: the medians and the paired ratios against ``off`` with
their goals, and the figure. Separate from the measuring, so ``--plot-only`` redraws from the
JSON without it."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .common import pyplot
from .trace_overhead_inprocess import IN_PROCESS
from .trace_overhead_wire import CONFIGS

GOALS = {"100%": 0.10, "0.01": 0.02}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    by = {n: [r["cpu_ms_per_event"] for r in runs if r["config"] == n] for n in CONFIGS}
    med = {n: statistics.median(v) for n, v in by.items() if v}
    base = med.get("off")
    out: dict[str, Any] = {}
    for n, m in med.items():
        ratio = None if not base else m / base - 1.0
        out[n] = {"cpu_ms_per_event_median": round(m, 4), "runs": by[n],
                  "overhead_vs_off": None if ratio is None else round(ratio, 4),
                  "goal": GOALS.get(n), "spans_per_event": statistics.median(
                      [r["spans_per_event"] for r in runs if r["config"] == n])}
        # the same ratio round by round (each round's configurations ran side by side)
        paired = [r["cpu_ms_per_event"] / o["cpu_ms_per_event"] - 1.0
                  for r in runs if r["config"] == n for o in runs
                  if o["config"] == "off" and o.get("round") == r.get("round")]
        if paired:
            out[n]["overhead_vs_off_by_round"] = [round(x, 4) for x in paired]
            ratio = statistics.median(paired)
            out[n]["overhead_vs_off_paired_median"] = round(ratio, 4)
        if n in GOALS and ratio is not None:
            out[n]["met"] = ratio <= GOALS[n]
    if "100%" in med and "100%-no-context" in med:
        out["materialize_span_us_per_event"] = round(
            (med["100%"] - med["100%-no-context"]) * 1000, 1)
    if "off" in med and "baseline-off" in med:
        out["off_vs_baseline"] = round(med["off"] / med["baseline-off"] - 1.0, 4)
    if "off" in med and "off-no-context" in med:
        out["context_parse_us_per_event_off"] = round((med["off"] - med["off-no-context"]) * 1000, 1)
    return out


COLORS = {"off": "#8c8c8c", "off-no-context": "#bbbbbb", "100%": "#4c72b0",
          "100%-no-context": "#7fa3d1", "0.01": "#55a868", "baseline-off": "#cccccc"}


def plot(runs: list[dict[str, Any]], summ: dict[str, Any], inproc: dict[str, Any],
         path: Path) -> None:
    plt = pyplot()
    names = [n for n in CONFIGS if n in summ]
    panels = 3 if inproc else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4.2))
    meds = [summ[n]["cpu_ms_per_event_median"] for n in names]
    axes[0].bar(names, meds, color=[COLORS[n] for n in names])
    for i, n in enumerate(names):
        xs = [r["cpu_ms_per_event"] for r in runs if r["config"] == n]
        axes[0].scatter([i] * len(xs), xs, color="black", s=8, zorder=3)
        ov = summ[n].get("overhead_vs_off_paired_median")
        if ov is not None and n != "off":
            axes[0].text(i, max(xs), f"{ov:+.1%}\n(paired)", ha="center", va="bottom", fontsize=8)
    axes[0].set_ylim(0, 1.3 * max(r["cpu_ms_per_event"] for r in runs))
    axes[0].set_ylabel("whole-process CPU ms per event")
    axes[0].set_title("on the wire: board-outbox run, median\n(dots: rounds, each run side by "
                      "side)", fontsize=9)
    if inproc:
        ins = [n for n in IN_PROCESS if n in inproc]
        axes[1].bar(ins, [inproc[n]["cpu_us_per_event_median"] for n in ins],
                    color=[COLORS[n] for n in ins])
        for i, n in enumerate(ins):
            if n != "off":
                axes[1].text(i, inproc[n]["cpu_us_per_event_median"],
                             f"{inproc[n]['tracing_us_per_event']:+.0f} µs", ha="center",
                             va="bottom", fontsize=8)
        axes[1].set_ylim(0, 1.2 * max(inproc[n]["cpu_us_per_event_median"] for n in ins))
        axes[1].set_ylabel("CPU µs per event")
        axes[1].set_title("in process, memory twins (no server): the\ntracing cost per event, "
                          "median of rounds", fontsize=9)
    axes[-1].bar(names, [summ[n]["spans_per_event"] for n in names],
                 color=[COLORS[n] for n in names])
    axes[-1].set_title("spans exported per event (wire)", fontsize=9)
    for ax in axes:
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("tracing overhead, one run, SecantusDB wire server (a launch and a projection "
                 "row per event, OTLP/HTTP export to the in-repo receiver)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
