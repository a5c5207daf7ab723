"""Span names, attribute keys and W3C trace-context helpers (conventions: tracing/README.md)."""

from __future__ import annotations

import re

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

from board_outbox.model.domain import EffectRow

SPAN_MATERIALIZE = "board_outbox.materialize"
SPAN_EXECUTE = "board_outbox.execute"

ATTR_TENANT = "board_outbox.tenant_id"
ATTR_SEQ = "board_outbox.seq"
ATTR_KIND = "board_outbox.kind"
ATTR_SUB = "board_outbox.sub_id"
ATTR_ROW_KEY = "board_outbox.row_key"
ATTR_ATTEMPT = "board_outbox.attempt"
ATTR_OUTCOME = "board_outbox.outcome"
ATTR_ROWS = "board_outbox.rows"
ATTR_SEQ_FIRST = "board_outbox.seq_first"
ATTR_SEQ_LAST = "board_outbox.seq_last"

# the materialize span's one event per batch: rows written, and the seqs they cover
EVENT_ROWS = "rows"
# F2: the execute span's event when the launch was over a limit (the row waits, not failed)
EVENT_DEFERRED = "deferred"
ATTR_REASON = "board_outbox.reason"
ATTR_WAIT = "board_outbox.wait_seconds"


def trace_context(span: trace.Span) -> str | None:
    """The span's W3C ``traceparent``, or None for a non-recording/invalid span."""
    return trace_context_of(span.get_span_context())


def trace_context_of(ctx: SpanContext) -> str | None:
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def parse_traceparent(value: str | None) -> SpanContext | None:
    if not value:
        return None
    # a stored trace context is data: each field exactly its W3C width of lowercase hex
    # (``int(x, 16)`` alone would take ``0x`` prefixes, ``_``, upper case and whitespace)
    parts = value.split("-")
    if (len(parts) != 4 or parts[0] != "00" or trace_id_of(value) is None
            or _SPAN_ID.fullmatch(parts[2]) is None or _FLAGS.fullmatch(parts[3]) is None):
        return None
    trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    ctx = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))
    return ctx if ctx.is_valid else None


def parent_and_links(traceparent: str | None) -> tuple[Context | None, list[Link]]:
    """Execute spans are children of, and linked to, the materialization that wrote the row."""
    ctx = parse_traceparent(traceparent)
    if ctx is None:
        return None, []
    return trace.set_span_in_context(NonRecordingSpan(ctx)), [Link(ctx)]


def start_execute_span(tracer: trace.Tracer, row: EffectRow, *, attempt: int) -> trace.Span:
    """The execute span of one attempt of a row: a child of, and linked to, the materialization
    that wrote it. Started, not made current (``trace.use_span`` does that); the caller ends it."""
    parent, links = parent_and_links(row.trace.traceparent if row.trace else None)
    attrs: dict[str, str | int] = {
        ATTR_TENANT: row.tenant_id,
        ATTR_SEQ: row.seq,
        ATTR_KIND: row.kind,
        ATTR_ROW_KEY: row.row_key,
        ATTR_ATTEMPT: attempt,
    }
    if row.sub_id:
        attrs[ATTR_SUB] = row.sub_id
    return tracer.start_span(SPAN_EXECUTE, context=parent, links=links, attributes=attrs)


_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")
_FLAGS = re.compile(r"[0-9a-f]{2}")


def trace_id_of(traceparent: str) -> str | None:
    """The trace id of a W3C ``traceparent`` (None: not one), e.g. for an exemplar: exactly 32
    lowercase hex digits, not all zeros. A stored trace context is data: ``int(x, 16)`` would
    also take ``0x`` prefixes, ``_``, upper case and surrounding whitespace or newlines."""
    parts = traceparent.split("-")
    if len(parts) != 4 or _TRACE_ID.fullmatch(parts[1]) is None or parts[1] == "0" * 32:
        return None
    return parts[1]
