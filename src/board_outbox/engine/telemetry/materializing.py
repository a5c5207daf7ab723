"""The trace context each materialized event's rows store (C7): the producer's trace continued.

An event whose producer wrote its context (``trace: {traceparent, tracestate}``, e.g. through
``board_outbox.producer.emit``) gets one ``materialize board_events`` span while the tail builds
its rows: a CONSUMER ``process`` span whose **parent** is the producer's span and which **links**
to it and to the batch's ``drain`` span. Its rows store this span's context, so every execute
attempt, the launch's HTTP call and the bot's own work land in the producer's trace: one trace
per event, from the board to the bot.

Why a span per event and not per batch: a batch holds many events from many producers' traces,
and a span has one parent. The messaging conventions (v1.44.0) make a batch span link to the
events' creation contexts; they allow a message's creation context as the parent of its own
``process`` span, with the ambient (batch) span as a link, which is what this does. The batch
span does not link to every event (links past 128 would be dropped): each event's span links
to the batch instead.

An event without a context (or with one that does not parse) costs no span: its rows store the
batch span's context, as rows always have, and its trace starts at the batch.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence

from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanKind
from opentelemetry.util.types import AttributeValue

from board_outbox.engine.telemetry.propagation import stored, stored_context
from board_outbox.engine.telemetry.spans import (
    ATTR_ROW_KEYS,
    ATTR_SEQ,
    ATTR_TENANT,
    EVENTS,
    MESSAGING_MESSAGE_ID,
    SPAN_MATERIALIZE,
    event_id,
    messaging,
)
from board_outbox.model.bad_documents import OnceLog
from board_outbox.model.rows import EffectRow, TraceContext

log = logging.getLogger("board_outbox.tail")
_once = OnceLog(log)
_MATERIALIZE = messaging("process", "materialize", EVENTS)
_DIGITS = re.compile(r"[0-9]+")


class EventSpans:
    """The ``materialize`` spans of one batch's events, one at a time: ``begin(seq)`` before an
    event's rows are built (the context they store), ``end(rows, first)`` after."""

    __slots__ = ("_batch", "_fallback", "_span", "_tenant", "_tracer", "_traces")

    def __init__(self, tracer: trace.Tracer, batch: trace.Span, tenant_id: str,
                 traces: Mapping[int, object] | None = None) -> None:
        self._tracer = tracer
        self._tenant = tenant_id
        self._traces = traces or {}
        ctx = batch.get_span_context()
        self._batch = Link(ctx) if ctx.is_valid else None
        self._fallback = stored(ctx)
        self._span: trace.Span | None = None

    def begin(self, seq: int) -> TraceContext | None:
        """The trace context event ``seq``'s rows store: its own ``materialize`` span's when its
        producer stored a context, else the batch's."""
        self._span = None
        raw = self._traces.get(seq)
        if raw is None:
            return self._fallback
        parent, problem = stored_context(raw)
        if problem is not None:
            self._report(seq, problem, kept=parent is not None)
        if parent is None:
            return self._fallback
        attrs: dict[str, AttributeValue] = {
            **_MATERIALIZE, MESSAGING_MESSAGE_ID: event_id(self._tenant, seq),
            ATTR_TENANT: self._tenant, ATTR_SEQ: seq}
        links = [Link(parent)] if self._batch is None else [Link(parent), self._batch]
        span = self._span = self._tracer.start_span(
            SPAN_MATERIALIZE, context=trace.set_span_in_context(NonRecordingSpan(parent)),
            kind=SpanKind.CONSUMER, links=links, attributes=attrs)
        return stored(span.get_span_context()) or self._fallback

    def _report(self, seq: int, problem: str, *, kept: bool) -> None:
        """One line per tenant and kind of problem (a producer writes every event alike)."""
        what = ("its traceparent is kept" if kept else
                "the event's rows join its batch's trace instead")
        _once((self._tenant, "trace", _DIGITS.sub("N", problem)), logging.WARNING,
              "event %s: stored trace context not usable (%s): %s", event_id(self._tenant, seq),
              problem, what, extra={"tenant_id": self._tenant, "seq": seq})

    def end(self, rows: Sequence[EffectRow], first: int) -> None:
        """The event's rows are ``rows[first:]``: named on its span, which ends here."""
        span, self._span = self._span, None
        if span is None:
            return
        if span.is_recording():
            span.set_attribute(ATTR_ROW_KEYS, [r.row_key for r in rows[first:]])
        span.end()
