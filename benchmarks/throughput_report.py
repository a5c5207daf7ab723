"""What ``throughput.py`` reports: the markdown table (each pipeline's rate against the floor's
and one replica's) and the figure. Separate from the measuring, so ``--plot-only`` redraws from
the JSON without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import (
    pyplot,
)

COLUMNS = (("events_per_s", "events/s (higher is better)"),
           ("server_cpu_ms_per_event", "server CPU ms per event"),
           ("requests_per_event_without_getmores", "requests per event (no getMores)"),
           ("getmores_per_event", "getMores per event"),
           ("longest_stall_s", "longest stretch without progress (s)"))


def label(run: dict[str, Any]) -> str:
    if run["pipeline"] == "floor":
        return "floor"
    n = run["replicas"]
    return f"{'before: ' if run['pipeline'] == 'base' else ''}{n} replica{'s' if n > 1 else ''}"


def table(runs: list[dict[str, Any]]) -> str:
    """The markdown table of one run: each pipeline's figures, its rate as a ratio to the floor's
    and to one replica's of the same source, at the same backlog."""
    lines = ["| backlog | pipeline | events/s | vs floor | vs 1 replica | server CPU ms/event | "
             "requests/event (no getMores) | getMores/event | longest stall s | load |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        same = [x for x in runs if x["events"] == r["events"]]
        floor = next((x for x in same if x["pipeline"] == "floor"), None)
        one = next((x for x in same if x["pipeline"] == r["pipeline"] and x["replicas"] == 1), None)

        def ratio(base: dict[str, Any] | None, r: dict[str, Any] = r) -> str:
            if base is None or not base["events_per_s"] or r["pipeline"] == "floor":
                return "--"
            return f"{r['events_per_s'] / base['events_per_s']:.2f}x"

        lines.append(
            f"| {r['events']:,} | {label(r)} | {r['events_per_s']} | {ratio(floor)} | "
            f"{ratio(one)} | {r['server_cpu_ms_per_event']} | "
            f"{r.get('requests_per_event_without_getmores', r['requests_per_event'])} | "
            f"{r.get('getmores_per_event', '--')} | {r.get('longest_stall_s', '--')} | "
            f"{r.get('load_average', '--')} |")
    return "\n".join(lines)


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    backlogs = sorted({r["events"] for r in runs})
    labels = list(dict.fromkeys(label(r) for r in sorted(
        runs, key=lambda r: (r["pipeline"] != "floor", r["pipeline"] == "base", r["replicas"]))))
    fig, axes = plt.subplots(1, len(COLUMNS), figsize=(4.2 * len(COLUMNS), 4.2))
    width = 0.8 / len(labels)
    for ax, (key, title) in zip(axes, COLUMNS, strict=True):
        for j, name in enumerate(labels):
            ys = []
            for b in backlogs:
                match = [r for r in runs if r["events"] == b and label(r) == name]
                ys.append((match[0].get(key) or 0) if match else 0)
            ax.bar([i + j * width for i in range(len(backlogs))], ys, width, label=name,
                   hatch="//" if name.startswith("before") else None)
        ax.set_xticks([i + width * (len(labels) - 1) / 2 for i in range(len(backlogs))])
        ax.set_xticklabels([f"{b:,} events" for b in backlogs])
        ax.set_title(title, fontsize=10)
    axes[0].legend(fontsize=7)
    fig.suptitle("board-outbox run vs the bare-driver floor, same server, same run "
                 "(SecantusDB wire server, 10 tenants, a launch and a projection row per event)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
