"""What ``replicas.py`` draws: the runs' requests per event, insert -> done and idle requests,
or the idle requests alone. Separate from the measuring, so ``--plot-only`` redraws from the
JSON without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import (
    pyplot,
)


def plot_idle(idle: list[dict[str, Any]], path: Path) -> None:
    """Idle requests/s of one replica by tenant count, this checkout beside the baseline, split
    into getMores and the rest."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    labels = [f"{i.get('src', '')}\n{i['tenants']:,} tenants" for i in idle]
    other = [i["idle_requests_per_s"] - i.get("idle_getmores_per_s", 0) for i in idle]
    ax.bar(labels, other, color="#228833", label="requests (no getMores)")
    ax.bar(labels, [i.get("idle_getmores_per_s", 0) for i in idle], bottom=other,
           color="#99dd99", label="getMores (the stream's, and large finds')")
    ax.axhline(5, color="#cc6677", ls="--", label="goal: 5/s per replica")
    ax.set(title="one idle replica: store requests/s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot(runs: list[dict[str, Any]], idle: list[dict[str, Any]], path: Path) -> None:
    if not runs:
        plot_idle(idle, path)
        return
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    xs = [r["replicas"] for r in runs]
    own = [r.get("requests_per_event_without_getmores", r["requests_per_event"]) for r in runs]
    axes[0].bar([str(x) for x in xs], own, color="#4477aa", label="without stream getMores")
    axes[0].bar([str(x) for x in xs], [r["requests_per_event"] - o for r, o in zip(runs, own, strict=True)],
                bottom=own, color="#aaccee", label="stream getMores (server quirk)")
    axes[0].axhline(6, color="#cc6677", ls="--", label="goal: 6 (1 replica)")
    axes[0].set(title="store requests per event", xlabel="replicas")
    axes[0].legend()
    axes[1].plot(xs, [r["insert_to_done_ms"].get("p50", 0) for r in runs], "o-", label="p50")
    axes[1].plot(xs, [r["insert_to_done_ms"].get("p99", 0) for r in runs], "s--", label="p99")
    axes[1].set(title="insert -> done (ms)", xlabel="replicas", xticks=xs)
    axes[1].legend()
    labels = [f"{r['replicas']}r/{r['tenants']}t" for r in runs] + \
        [f"1r/{i['tenants']}t" for i in idle]
    axes[2].bar(labels, [r["idle_requests_per_s"] for r in runs] +
                [i["idle_requests_per_s"] for i in idle], color="#228833")
    axes[2].axhline(5, color="#cc6677", ls="--", label="goal: 5/s per replica")
    axes[2].set(title="idle requests/s (all replicas)")
    axes[2].legend()
    axes[2].tick_params(axis="x", labelrotation=30)
    fig.suptitle("board-outbox run x N on the MongoDB-wire server (SecantusDB), 20 tenants")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
