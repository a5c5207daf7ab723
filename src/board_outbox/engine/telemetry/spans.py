"""Span names, kinds and attribute keys, and starting the service's spans (C3, C7).

The names, kinds and ``messaging.*`` attributes follow the OpenTelemetry semantic conventions
for messaging spans, v1.44.0 (status: development): a span is named
``{messaging.operation.name} {destination}``; the producer's ``send`` span is the event's
creation context (kind PRODUCER); processing is ``process`` (kind CONSUMER); the launch's HTTP
call is a CLIENT span (``adapters/launchers/http.py``). The semconv Python package exposes the
messaging names only under a private ``_incubating`` module, so they are spelled out here.
Conventions and a walk through one trace: tracing/README.md, docs/tracing.md.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, SpanKind
from opentelemetry.util.types import AttributeValue

# where the console and older callers found them
from board_outbox.engine.telemetry.propagation import parse_traceparent as parse_traceparent
from board_outbox.engine.telemetry.propagation import trace_id_of as trace_id_of
from board_outbox.model.rows import EffectRow, TraceContext

# messaging.system: no well-known value fits an outbox on MongoDB collections; a custom one
SYSTEM = "board_outbox"
EVENTS = "board_events"  # the destination events are sent to
ROWS = "trigger_effects"  # the destination rows are executed from

SPAN_SEND = f"send {EVENTS}"  # the producer's insert (PRODUCER; the creation context)
SPAN_DRAIN = f"drain {EVENTS}"  # one tail batch (CONSUMER, process)
SPAN_MATERIALIZE = f"materialize {EVENTS}"  # one event of a batch that carried a context
SPAN_EXECUTE = f"execute {ROWS}"  # one attempt at a row (CONSUMER, process)

# semantic-convention attribute keys (messaging, v1.44.0)
MESSAGING_SYSTEM = "messaging.system"
MESSAGING_OPERATION_TYPE = "messaging.operation.type"
MESSAGING_OPERATION_NAME = "messaging.operation.name"
MESSAGING_DESTINATION = "messaging.destination.name"
MESSAGING_MESSAGE_ID = "messaging.message.id"
MESSAGING_BATCH_COUNT = "messaging.batch.message_count"

ATTR_TENANT = "board_outbox.tenant_id"
ATTR_SEQ = "board_outbox.seq"
ATTR_KIND = "board_outbox.kind"
ATTR_SUB = "board_outbox.sub_id"
ATTR_ROW_KEY = "board_outbox.row_key"
ATTR_ROW_KEYS = "board_outbox.row_keys"  # the rows one materialized event wrote
ATTR_ATTEMPT = "board_outbox.attempt"
ATTR_OUTCOME = "board_outbox.outcome"
ATTR_ROWS = "board_outbox.rows"
ATTR_SEQ_FIRST = "board_outbox.seq_first"
ATTR_SEQ_LAST = "board_outbox.seq_last"
ATTR_EVENT_TYPE = "board_outbox.event_type"
ATTR_CARD = "board_outbox.card_id"

# the drain span's one event per batch: rows written, and the seqs they cover
EVENT_ROWS = "rows"
# F2: the execute span's event when the launch was over a limit (the row waits, not failed)
EVENT_DEFERRED = "deferred"
ATTR_REASON = "board_outbox.reason"
ATTR_WAIT = "board_outbox.wait_seconds"


def messaging(operation_type: str, operation: str, destination: str) -> dict[str, AttributeValue]:
    """The messaging attributes every span of ours starts with (semconv: set at creation, so a
    sampler can read them)."""
    return {MESSAGING_SYSTEM: SYSTEM, MESSAGING_OPERATION_TYPE: operation_type,
            MESSAGING_OPERATION_NAME: operation, MESSAGING_DESTINATION: destination}


_DRAIN = messaging("process", "drain", EVENTS)
_EXECUTE = messaging("process", "execute", ROWS)


def event_id(tenant_id: str, seq: int) -> str:
    """An event's message id: ``tenant/seq``, the prefix of every row key it gives."""
    return f"{tenant_id}/{seq}"


def drain_span(tracer: trace.Tracer, tenant_id: str) -> AbstractContextManager[trace.Span]:
    """One tail batch's span, current inside the ``with``: a CONSUMER ``process`` span over
    the batch, the root of its own trace (its events' ``materialize`` spans link to it)."""
    return tracer.start_as_current_span(SPAN_DRAIN, kind=SpanKind.CONSUMER,
                                        attributes={**_DRAIN, ATTR_TENANT: tenant_id})


def parent_and_links(stored: TraceContext | None) -> tuple[Context | None, list[Link]]:
    """Execute spans are children of, and linked to, the span whose context the row stores:
    its event's ``materialize`` span, or its batch's ``drain`` span when the event carried no
    context. A planted or broken one gives neither (the span starts its own trace)."""
    if stored is None:
        return None, []
    ctx = parse_traceparent(stored.traceparent, stored.tracestate)
    if ctx is None:
        return None, []
    return trace.set_span_in_context(NonRecordingSpan(ctx)), [Link(ctx)]


def start_execute_span(tracer: trace.Tracer, row: EffectRow, *, attempt: int) -> trace.Span:
    """The execute span of one attempt of a row (CONSUMER ``process``; the row key is its
    message id): a child of, and linked to, the span whose context the row stores. Started,
    not made current (``trace.use_span`` does that); the caller ends it."""
    parent, links = parent_and_links(row.trace)
    attrs: dict[str, AttributeValue] = {
        **_EXECUTE,
        MESSAGING_MESSAGE_ID: row.row_key,
        ATTR_TENANT: row.tenant_id,
        ATTR_SEQ: row.seq,
        ATTR_KIND: row.kind,
        ATTR_ROW_KEY: row.row_key,
        ATTR_ATTEMPT: attempt,
    }
    if row.sub_id:
        attrs[ATTR_SUB] = row.sub_id
    return tracer.start_span(SPAN_EXECUTE, context=parent, links=links, attributes=attrs,
                             kind=SpanKind.CONSUMER)
