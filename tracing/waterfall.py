"""Render one effect row's trace as a tree: from the producer's ``send`` span through the
event's ``materialize`` (or the batch's ``drain``), every ``execute`` attempt, each launch's
HTTP ``POST`` and whatever the bot runner recorded under it.

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
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROW_KEY = "board_outbox.row_key"
ROW_KEYS = "board_outbox.row_keys"
TENANT = "board_outbox.tenant_id"
SEQ_FIRST = "board_outbox.seq_first"
SEQ_LAST = "board_outbox.seq_last"
MESSAGE_ID = "messaging.message.id"
SEND = "send board_events"
DRAIN = "drain board_events"
MATERIALIZE = "materialize board_events"
EXECUTE = "execute trigger_effects"
# the names before the messaging conventions (files exported by older releases still render)
OLD_NAMES = {"board_outbox.materialize": DRAIN, "board_outbox.execute": EXECUTE}
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
KINDS = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start_ns: int
    end_ns: int
    service: str = ""
    kind: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    links: list[tuple[str, str]] = field(default_factory=list)
    error: str = ""
    event_rows: list[str] = field(default_factory=list)  # row keys of per-row events (older)
    event_seqs: list[tuple[int, int]] = field(default_factory=list)  # per-batch events' ranges

    def names_row(self, row_key: str) -> bool:
        keys = self.attributes.get(ROW_KEYS)
        return self.attributes.get(ROW_KEY) == row_key or (
            isinstance(keys, list) and row_key in keys)

    def wrote(self, row_key: str) -> bool:
        """Did this drain span write the row? By a per-row event naming it, or by a per-batch
        event whose seq range covers the row's seq, for the span's tenant (a row key is
        ``tenant/seq/...``)."""
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
    if "arrayValue" in v:
        return [_attr_value(x) for x in v["arrayValue"].get("values", [])]
    return None


def _seq_range(attrs: dict[str, Any]) -> list[tuple[int, int]]:
    first, last = attrs.get(SEQ_FIRST), attrs.get(SEQ_LAST)
    try:
        return [] if first is None or last is None else [(int(first), int(last))]
    except (TypeError, ValueError):
        return []


def _service(name: object, instance: object) -> str:
    """``name/instance`` (a replica's ``service.replica_name``), or the name alone when the
    instance is the SDK's random default (a UUID)."""
    if not instance or _UUID.fullmatch(str(instance)):
        return str(name or "")
    return f"{name}/{instance}" if name else str(instance)


def _otlp_spans(doc: dict[str, Any]) -> Iterable[Span]:
    for rs in doc.get("resourceSpans", []):
        res = {a["key"]: _attr_value(a["value"]) for a in rs.get("resource", {}).get("attributes", [])}
        service = _service(res.get("service.name"), res.get("service.instance.id"))
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                attrs = {a["key"]: _attr_value(a["value"]) for a in s.get("attributes", [])}
                rows = [str(_attr_value(a["value"])) for e in s.get("events", [])
                        for a in e.get("attributes", []) if a["key"] == ROW_KEY]
                seqs = [r for e in s.get("events", []) for r in _seq_range(
                    {a["key"]: _attr_value(a["value"]) for a in e.get("attributes", [])})]
                status = s.get("status", {})
                failed = status.get("code") in (2, "STATUS_CODE_ERROR")
                kind = s.get("kind", 0)
                yield Span(
                    trace_id=_hex(s["traceId"]), span_id=_hex(s["spanId"]),
                    parent_id=_hex(s.get("parentSpanId", "")),
                    name=OLD_NAMES.get(s["name"], s["name"]),
                    start_ns=int(s["startTimeUnixNano"]), end_ns=int(s["endTimeUnixNano"]),
                    service=service, attributes=attrs,
                    kind=KINDS.get(kind, "") if isinstance(kind, int) else
                    str(kind).removeprefix("SPAN_KIND_").lower(),
                    links=[(_hex(ln["traceId"]), _hex(ln["spanId"])) for ln in s.get("links", [])],
                    error=(status.get("message") or "status ERROR") if failed else "",
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
                name=OLD_NAMES.get(s["operationName"], s["operationName"]),
                start_ns=start, end_ns=start + int(s["duration"]) * 1000,
                service=procs.get(s.get("processID"), {}).get("serviceName", ""),
                kind=str(tags.get("span.kind", "")), attributes=tags, links=links,
                error=str(tags.get("otel.status_description", "status ERROR")) if tags.get("error") else "",
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


def row_tree(spans: list[Span], row_key: str) -> list[tuple[int, Span]]:
    """The row's trace as (depth, span), depth first in start order: the spans above the row's
    execute attempts (its event's ``materialize``, the producer's ``send`` and whatever the
    producer was inside) and everything below them (HTTP calls, the bot's spans). Other rows of
    the same trace are left out. A row not yet executed: the span that wrote it."""
    by_id = {s.span_id: s for s in spans}
    mine = [s for s in spans if s.name == EXECUTE and s.names_row(row_key)]
    executed = bool(mine)
    if not executed:
        mine = [s for s in spans if s.name == MATERIALIZE and s.names_row(row_key)] or sorted(
            (s for s in spans if s.name == DRAIN and s.wrote(row_key)), key=lambda s: s.start_ns)[:1]
    keep: set[str] = set()
    for s in mine:  # up: the ancestors present in the file
        cur: Span | None = s
        while cur is not None and cur.span_id not in keep:
            keep.add(cur.span_id)
            cur = by_id.get(cur.parent_id)
    if not keep:
        return []
    roots = {s.span_id for s in mine} if executed else set()  # a batch's other rows stay out
    if executed:
        # spans of the row whose parent is not in the file -- lost with a replica that crashed
        # mid-attempt (its execute and POST spans never ended) -- still belong to its trace
        traces = {s.trace_id for s in mine}
        lost = {s.span_id for s in spans if s.trace_id in traces and s.names_row(row_key)
                and s.parent_id and s.parent_id not in by_id}
        keep |= lost
        roots |= lost
    children: dict[str, list[Span]] = {}
    for s in spans:
        children.setdefault(s.parent_id, []).append(s)
    stack = list(roots)
    while stack:  # down: everything under the row's attempts
        for c in children.get(stack.pop(), []):
            if c.span_id not in keep:
                keep.add(c.span_id)
                stack.append(c.span_id)
    kept = [s for s in spans if s.span_id in keep]
    out: list[tuple[int, Span]] = []

    def walk(span: Span, depth: int) -> None:
        out.append((depth, span))
        for c in sorted((c for c in children.get(span.span_id, []) if c.span_id in keep),
                        key=lambda c: c.start_ns):
            walk(c, depth + 1)

    # roots of the kept forest: a span whose parent is absent (lost with a crashed replica,
    # or outside the file) starts its own branch
    for top in sorted((s for s in kept if s.parent_id not in keep), key=lambda s: s.start_ns):
        walk(top, 0)
    return out


def row_trace(spans: list[Span], row_key: str) -> list[Span]:
    """The row's spans in tree order (``row_tree`` without the depths)."""
    return [s for _, s in row_tree(spans, row_key)]


def label(span: Span) -> tuple[str, str]:
    """(what the span is, its salient detail) as the waterfall prints them."""
    a = span.attributes
    if span.name == EXECUTE:
        info = f"outcome={a.get('board_outbox.outcome', '?')}"
        return f"execute #{a.get('board_outbox.attempt', '?')}", info
    if span.name == DRAIN:
        return f"drain {a.get(TENANT, '')}", f"rows={a.get('board_outbox.rows', '?')}"
    if span.name in (MATERIALIZE, SEND):
        verb = "materialize" if span.name == MATERIALIZE else "send"
        keys = a.get(ROW_KEYS)
        return f"{verb} {a.get(MESSAGE_ID, '')}", (f"rows={len(keys)}" if isinstance(keys, list)
                                                   else span.kind)
    if "http.request.method" in a:
        code = a.get("http.response.status_code")
        return f"{a['http.request.method']} {code or ''}".strip(), f"{span.kind} {a.get('url.full', '')}"
    return span.name, span.kind


def render_text(tree: list[tuple[int, Span]] | list[Span], row_key: str, width: int = 40) -> str:
    nodes = [(0, n) if isinstance(n, Span) else n for n in tree]
    if not nodes:
        return f"no spans for row {row_key!r}"
    t0 = min(s.start_ns for _, s in nodes)
    total = max(max(s.end_ns for _, s in nodes) - t0, 1)
    present = {s.span_id for _, s in nodes}
    traces = sorted({s.trace_id for _, s in nodes})
    lines = [f"row {row_key}   trace {', '.join(traces)}   {total / 1e6:.1f} ms end to end"]
    for depth, s in nodes:
        a = int((s.start_ns - t0) / total * width)
        b = max(a + 1, int((s.end_ns - t0) / total * width))
        bar = " " * a + "█" * (b - a) + " " * (width - b)
        what, info = label(s)
        if s.error:
            info += f" error={s.error[:60]}"
        if s.parent_id and s.parent_id not in present and depth == 0:
            info += "  (its parent span was never exported: lost with a crashed process?)"
        lines.append(f"{'  ' * depth + what:32} {s.service[:16]:16} |{bar}| "
                     f"+{(s.start_ns - t0) / 1e6:8.1f} ms {s.ms:7.2f} ms  {info}")
    return "\n".join(lines)


def render_png(tree: list[tuple[int, Span]], row_key: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = min(s.start_ns for _, s in tree)
    total_ms = max(s.end_ns for _, s in tree) / 1e6 - t0 / 1e6
    min_w = max(total_ms * 0.008, 0.05)  # keep sub-millisecond spans visible
    colors = {"producer": "#8172b2", "consumer": "#4c72b0", "client": "#55a868",
              "server": "#ccb974"}
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.42 * len(tree)))
    for i, (depth, s) in enumerate(tree):
        color = "#c44e52" if s.error else colors.get(s.kind, "#8c8c8c")
        ax.barh(i, max(s.ms, min_w), left=(s.start_ns - t0) / 1e6, color=color, height=0.6)
        what, info = label(s)
        ax.text((s.end_ns - t0) / 1e6, i, f"  {'  ' * depth}{what} ({s.service}) {info}",
                va="center", fontsize=7)
    ax.set_yticks([])
    ax.set_xlim(0, total_ms * 1.6 + min_w)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the first span")
    ax.set_title(f"row {row_key}: one trace, producer to bot", fontsize=10)
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
        keys = sorted({str(s.attributes[ROW_KEY]) for s in spans
                       if s.name == EXECUTE and ROW_KEY in s.attributes})
        print("\n".join(keys) if keys else "no effect rows in this file")
        return 0
    tree = row_tree(spans, args.row)
    print(render_text(tree, args.row))
    if not tree:
        return 1
    if args.png:
        render_png(tree, args.row, args.png)
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
