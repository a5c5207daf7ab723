"""Telemetry, one package with modules by role (conventions: tracing/README.md, docs/tracing.md):

- ``spans``: span names, kinds and attribute keys (the OpenTelemetry messaging conventions), and
  starting the drain and execute spans (the API only; re-exported here, so
  ``telemetry.SPAN_EXECUTE`` reads as before);
- ``propagation``: W3C trace context in (a stored event's or row's ``trace``, parsed per
  document) and out (an outgoing call's headers), through OpenTelemetry's propagators;
- ``materializing``: ``EventSpans``, the span that continues a producer's trace into an event's
  rows;
- ``metrics``: the service's instruments (OpenTelemetry metrics API).

The SDK is set up from the standard OTEL_* variables by ``service/telemetry.py`` (the entry
points call it; the core never imports it).

A bottom room: it imports no other room of ``engine``.
"""

from __future__ import annotations

from board_outbox.engine.telemetry.materializing import EventSpans
from board_outbox.engine.telemetry.propagation import (
    headers,
    parse_traceparent,
    stored,
    stored_context,
    trace_context,
    trace_context_of,
    trace_id_of,
)
from board_outbox.engine.telemetry.spans import (
    ATTR_ATTEMPT,
    ATTR_CARD,
    ATTR_EVENT_TYPE,
    ATTR_KIND,
    ATTR_OUTCOME,
    ATTR_REASON,
    ATTR_ROW_KEY,
    ATTR_ROW_KEYS,
    ATTR_ROWS,
    ATTR_SEQ,
    ATTR_SEQ_FIRST,
    ATTR_SEQ_LAST,
    ATTR_SUB,
    ATTR_TENANT,
    ATTR_WAIT,
    EVENT_DEFERRED,
    EVENT_ROWS,
    EVENTS,
    MESSAGING_BATCH_COUNT,
    MESSAGING_DESTINATION,
    MESSAGING_MESSAGE_ID,
    MESSAGING_OPERATION_NAME,
    MESSAGING_OPERATION_TYPE,
    MESSAGING_SYSTEM,
    ROWS,
    SPAN_DRAIN,
    SPAN_EXECUTE,
    SPAN_MATERIALIZE,
    SPAN_SEND,
    SYSTEM,
    drain_span,
    event_id,
    messaging,
    parent_and_links,
    start_execute_span,
)

__all__ = [
    "ATTR_ATTEMPT",
    "ATTR_CARD",
    "ATTR_EVENT_TYPE",
    "ATTR_KIND",
    "ATTR_OUTCOME",
    "ATTR_REASON",
    "ATTR_ROWS",
    "ATTR_ROW_KEY",
    "ATTR_ROW_KEYS",
    "ATTR_SEQ",
    "ATTR_SEQ_FIRST",
    "ATTR_SEQ_LAST",
    "ATTR_SUB",
    "ATTR_TENANT",
    "ATTR_WAIT",
    "EVENTS",
    "EVENT_DEFERRED",
    "EVENT_ROWS",
    "MESSAGING_BATCH_COUNT",
    "MESSAGING_DESTINATION",
    "MESSAGING_MESSAGE_ID",
    "MESSAGING_OPERATION_NAME",
    "MESSAGING_OPERATION_TYPE",
    "MESSAGING_SYSTEM",
    "ROWS",
    "SPAN_DRAIN",
    "SPAN_EXECUTE",
    "SPAN_MATERIALIZE",
    "SPAN_SEND",
    "SYSTEM",
    "EventSpans",
    "drain_span",
    "event_id",
    "headers",
    "messaging",
    "parent_and_links",
    "parse_traceparent",
    "start_execute_span",
    "stored",
    "stored_context",
    "trace_context",
    "trace_context_of",
    "trace_id_of",
]
