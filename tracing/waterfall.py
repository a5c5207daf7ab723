"""Render one effect row's trace as a waterfall: materialization -> every execute attempt.

Reads an exported trace file:
- OTLP JSON lines (the OpenTelemetry Collector's file exporter, or tracing/otlp_receiver.py);
- a Jaeger JSON export (UI "Download JSON", or GET /api/traces/<id>).

    python -m tracing.waterfall spans.jsonl --row t1/42/sub/triage [--png row.png]
    python -m tracing.waterfall spans.jsonl --list          # rows found in the file
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROW_KEY = "board_outbox.row_key"
TENANT = "board_outbox.tenant_id"
SEQ_FIRST = "board_outbox.seq_first"
SEQ_LAST = "board_outbox.seq_last"
MATERIALIZE = "board_outbox.materialize"
EXECUTE = "board_outbox.execute"


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start_ns: int
    end_ns: int
    service: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    links: list[tuple[str, str]] = field(default_factory=list)
    error: str = ""
    event_rows: list[str] = field(default_factory=list)  # row keys of per-row events (older)
    event_seqs: list[tuple[int, int]] = field(default_factory=list)  # per-batch events' ranges

    def wrote(self, row_key: str) -> bool:
        """Did this materialize span write the row? By a per-row event naming it, or by a
        per-batch event whose seq range covers the row's seq, for the span's tenant (a row key
        is ``tenant/seq/...``)."""
        if row_key in self.event_rows:
            return True
        parts = row_key.split("/")
        if len(parts) < 3 or parts[0] != self.attributes.get(TENANT) or not parts[1].isdigit():
            return False
        seq = int(parts[1])
        return any(first <= seq <= last for first, last in self.event_seqs)

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def _hex(v: str) -> str:
    if not v:
        return ""
    try:
        int(v, 16)
        if len(v) in (16, 32):
            return v.lower()
    except ValueError:
        pass
    return base64.b64decode(v).hex()  # plain protobuf JSON mapping


def _attr_value(v: dict[str, Any]) -> Any:
    for k in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if k in v:
            return int(v[k]) if k == "intValue" else v[k]
    return None


def _seq_range(attrs: dict[str, Any]) -> list[tuple[int, int]]:
    first, last = attrs.get(SEQ_FIRST), attrs.get(SEQ_LAST)
    try:
        return [] if first is None or last is None else [(int(first), int(last))]
    except (TypeError, ValueError):
        return []


def _otlp_spans(doc: dict[str, Any]) -> Iterable[Span]:
    for rs in doc.get("resourceSpans", []):
        service = next((_attr_value(a["value"]) for a in rs.get("resource", {}).get("attributes", [])
                        if a["key"] == "service.instance.id"), None) or next(
            (_attr_value(a["value"]) for a in rs.get("resource", {}).get("attributes", [])
             if a["key"] == "service.name"), "")
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                attrs = {a["key"]: _attr_value(a["value"]) for a in s.get("attributes", [])}
                rows = [str(_attr_value(a["value"])) for e in s.get("events", [])
                        for a in e.get("attributes", []) if a["key"] == ROW_KEY]
                seqs = [r for e in s.get("events", []) for r in _seq_range(
                    {a["key"]: _attr_value(a["value"]) for a in e.get("attributes", [])})]
                status = s.get("status", {})
                yield Span(
                    trace_id=_hex(s["traceId"]), span_id=_hex(s["spanId"]),
                    parent_id=_hex(s.get("parentSpanId", "")), name=s["name"],
                    start_ns=int(s["startTimeUnixNano"]), end_ns=int(s["endTimeUnixNano"]),
                    service=str(service), attributes=attrs,
                    links=[(_hex(ln["traceId"]), _hex(ln["spanId"])) for ln in s.get("links", [])],
                    error=status.get("message", "") if status.get("code") in (2, "STATUS_CODE_ERROR") else "",
                    event_rows=rows, event_seqs=seqs,
                )


def _jaeger_spans(doc: dict[str, Any]) -> Iterable[Span]:
    for tr in doc.get("data", []):
        procs = tr.get("processes", {})
        for s in tr.get("spans", []):
            parent = next((r["spanID"] for r in s.get("references", [])
                           if r.get("refType") == "CHILD_OF"), "")
            links = [(r["traceID"], r["spanID"]) for r in s.get("references", [])
                     if r.get("refType") == "FOLLOWS_FROM"]
            tags = {t["key"]: t["value"] for t in s.get("tags", [])}
            rows = [str(f["value"]) for lg in s.get("logs", []) for f in lg.get("fields", [])
                    if f["key"] == ROW_KEY]
            seqs = [r for lg in s.get("logs", []) for r in _seq_range(
                {f["key"]: f["value"] for f in lg.get("fields", [])})]
            start = int(s["startTime"]) * 1000
            yield Span(
                trace_id=s["traceID"], span_id=s["spanID"], parent_id=parent,
                name=s["operationName"], start_ns=start, end_ns=start + int(s["duration"]) * 1000,
                service=procs.get(s.get("processID"), {}).get("serviceName", ""),
                attributes=tags, links=links,
                error=str(tags.get("otel.status_description", "")) if tags.get("error") else "",
                event_rows=rows, event_seqs=seqs,
            )


def load(path: Path) -> list[Span]:
    text = path.read_text()
    docs: list[dict[str, Any]] = []
    try:
        whole = json.loads(text)
        docs = whole if isinstance(whole, list) else [whole]
    except json.JSONDecodeError:
        docs = [json.loads(line) for line in text.splitlines() if line.strip()]
    spans: list[Span] = []
    for d in docs:
        spans += list(_jaeger_spans(d) if "data" in d else _otlp_spans(d))
    return spans


def row_trace(spans: list[Span], row_key: str) -> list[Span]:
    """The materialize span that wrote the row, then the row's execute attempts in order."""
    execs = sorted((s for s in spans if s.name == EXECUTE and s.attributes.get(ROW_KEY) == row_key),
                   key=lambda s: s.start_ns)
    mats = {s.span_id: s for s in spans if s.name == MATERIALIZE}
    parents = {s.parent_id for s in execs} | {sid for s in execs for _, sid in s.links}
    born = [m for m in mats.values() if m.span_id in parents or m.wrote(row_key)]
    return sorted(born, key=lambda s: s.start_ns)[:1] + execs


def render_text(chain: list[Span], row_key: str, width: int = 40) -> str:
    if not chain:
        return f"no spans for row {row_key!r}"
    t0 = min(s.start_ns for s in chain)
    t1 = max(s.end_ns for s in chain)
    total = max(t1 - t0, 1)
    lines = [f"row {row_key}   trace {chain[0].trace_id}   {total / 1e6:.1f} ms end to end"]
    for s in chain:
        a = int((s.start_ns - t0) / total * width)
        b = max(a + 1, int((s.end_ns - t0) / total * width))
        bar = " " * a + "█" * (b - a) + " " * (width - b)
        if s.name == MATERIALIZE:
            label = f"materialize {s.attributes.get('board_outbox.tenant_id', '')}"
            info = f"rows={s.attributes.get('board_outbox.rows', '?')}"
        else:
            label = f"  execute #{s.attributes.get('board_outbox.attempt', '?')}"
            info = f"outcome={s.attributes.get('board_outbox.outcome', '?')}"
            if s.error:
                info += f" error={s.error[:60]}"
        lines.append(f"{label:26} {s.service[:14]:14} |{bar}| +{(s.start_ns - t0) / 1e6:8.1f} ms "
                     f"{s.ms:7.2f} ms  {info}")
    return "\n".join(lines)


def render_png(chain: list[Span], row_key: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = min(s.start_ns for s in chain)
    total_ms = max(s.end_ns for s in chain) / 1e6 - t0 / 1e6
    min_w = max(total_ms * 0.008, 0.05)  # keep sub-millisecond attempts visible
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.5 * len(chain)))
    for i, s in enumerate(chain):
        color = "#4c72b0" if s.name == MATERIALIZE else ("#c44e52" if s.error else "#55a868")
        ax.barh(i, max(s.ms, min_w), left=(s.start_ns - t0) / 1e6, color=color, height=0.6)
        attempt = s.attributes.get("board_outbox.attempt")
        name = "materialize" if s.name == MATERIALIZE else f"execute #{attempt}"
        ax.text((s.end_ns - t0) / 1e6, i, f"  {name} ({s.service}) "
                f"{s.attributes.get('board_outbox.outcome', '')}", va="center", fontsize=8)
    ax.set_yticks([])
    ax.set_xlim(0, total_ms * 1.45 + min_w)
    ax.invert_yaxis()
    ax.set_xlabel("ms since materialization")
    ax.set_title(f"row {row_key}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=Path, help="OTLP JSON lines or a Jaeger JSON export")
    ap.add_argument("--row", help="the row key to render")
    ap.add_argument("--png", type=Path, help="also draw the waterfall to this PNG")
    ap.add_argument("--list", action="store_true", help="list the row keys in the file")
    args = ap.parse_args(argv)
    try:
        spans = load(args.file)
    except (OSError, ValueError, KeyError) as exc:
        print(f"waterfall: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    if args.list or not args.row:
        keys = sorted({str(s.attributes[ROW_KEY]) for s in spans if ROW_KEY in s.attributes})
        print("\n".join(keys) if keys else "no effect rows in this file")
        return 0
    chain = row_trace(spans, args.row)
    print(render_text(chain, args.row))
    if not chain:
        return 1
    if args.png:
        render_png(chain, args.row, args.png)
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
