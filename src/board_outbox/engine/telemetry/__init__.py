"""Telemetry, one package with modules by role (conventions: tracing/README.md):

- ``spans``: span names, attribute keys and W3C trace-context helpers (the API only; re-exported
  here, so ``telemetry.SPAN_EXECUTE`` reads as before);
- ``metrics``: the service's instruments (OpenTelemetry metrics API);
- ``sdk``: SDK setup from the standard OTEL_* variables (the entry points call it; the core never
  imports it).
"""

from __future__ import annotations

from board_outbox.engine.telemetry.spans import (
    ATTR_ATTEMPT,
    ATTR_KIND,
    ATTR_OUTCOME,
    ATTR_REASON,
    ATTR_ROW_KEY,
    ATTR_ROWS,
    ATTR_SEQ,
    ATTR_SEQ_FIRST,
    ATTR_SEQ_LAST,
    ATTR_SUB,
    ATTR_TENANT,
    ATTR_WAIT,
    EVENT_DEFERRED,
    EVENT_ROWS,
    SPAN_EXECUTE,
    SPAN_MATERIALIZE,
    parent_and_links,
    parse_traceparent,
    start_execute_span,
    trace_context,
    trace_context_of,
)

__all__ = [
    "ATTR_ATTEMPT",
    "ATTR_KIND",
    "ATTR_OUTCOME",
    "ATTR_REASON",
    "ATTR_ROWS",
    "ATTR_ROW_KEY",
    "ATTR_SEQ",
    "ATTR_SEQ_FIRST",
    "ATTR_SEQ_LAST",
    "ATTR_SUB",
    "ATTR_TENANT",
    "ATTR_WAIT",
    "EVENT_DEFERRED",
    "EVENT_ROWS",
    "SPAN_EXECUTE",
    "SPAN_MATERIALIZE",
    "parent_and_links",
    "parse_traceparent",
    "start_execute_span",
    "trace_context",
    "trace_context_of",
]
