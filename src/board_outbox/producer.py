"""The public face for producers: the board application's side of board-outbox (C7).

``emit`` writes one board event the way the service reads them: it allocates the tenant's next
seq in ``board_event_counters``, inserts the event with that seq into ``board_events`` and
returns it. ``emit_sync`` is the same on a synchronous pymongo ``Database``.

The event carries the caller's trace: ``emit`` runs inside a PRODUCER span (``send
board_events``, the OpenTelemetry messaging conventions v1.44.0: a single-message send whose
span is the event's creation context) and stores that span's W3C context in the event
(``trace: {traceparent, tracestate}``, through OpenTelemetry's propagator). The service
continues it: the event's rows, their execute attempts, the launch's HTTP call and the bot
runner's own spans all join the producer's trace (docs/tracing.md). With no OpenTelemetry SDK
in the producer (the API alone is a no-op) and no current context, nothing is stored and the
service starts the event's trace itself.

Seqs and holes (M7): a seq is allocated first, then the event is inserted; two writes, never a
transaction. If the insert fails (or the process dies between the two) the seq is a hole: the
service waits ``young_gap_seconds`` for it, then steps over it with one warning. ``emit``
raises (``StoreUnavailable``: transient, try ``emit`` again, which takes a new seq;
``StoreError``: not transient), and checks the document before a seq is spent on it, so a bad
event raises ``ValueError`` and leaves no hole. Events of one tenant are ordered by seq: emit
them one at a time per tenant when their order matters.

Guide: docs/producer-api.md. Only ``board_outbox.producer`` is public here; the modules it uses
may move between releases.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import msgspec
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from board_outbox.adapters.mongo.events import EVENTS
from board_outbox.adapters.mongo.producing import (
    AsyncEventsDatabase,
    EventsDatabase,
    append,
    append_sync,
    check_document,
)
from board_outbox.engine import telemetry
from board_outbox.model.errors import StoreError, StoreUnavailable
from board_outbox.model.ids import check_id
from board_outbox.model.rows import TraceContext

__all__ = ["RESERVED_FIELDS", "EmittedEvent", "StoreError", "StoreUnavailable", "TraceContext",
           "emit", "emit_sync"]

# the fields the service itself reads or writes; ``fields`` may not set them
RESERVED_FIELDS = frozenset({"_id", "tenant_id", "seq", "type", "card_id", "at", "actor", "trace"})
_SEND = telemetry.messaging("send", "send", EVENTS)


class EmittedEvent(msgspec.Struct, frozen=True, kw_only=True):
    """The event as stored in ``board_events``: its tenant, the seq it was given, its type and
    card, when it happened (``at``, epoch seconds), who caused it (``actor``), and the W3C trace
    context it carries (``trace``; None: none was current). ``fields`` holds the extra fields
    the caller stored with it (the service ignores them)."""

    tenant_id: str
    seq: int
    type: str
    card_id: str
    at: float
    actor: str | None = None
    trace: TraceContext | None = None
    fields: Mapping[str, Any] = msgspec.field(default_factory=dict)


def _document(tenant_id: str, type: str, card_id: str, actor: str | None, at: float | None,
              fields: Mapping[str, Any] | None) -> dict[str, Any]:
    """The event's document without its seq; ``ValueError`` (``InvalidId`` for the tenant) for
    anything the service would refuse to read."""
    check_id("tenant_id", tenant_id)
    for name, value in (("type", type), ("card_id", card_id)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string, not {value!r}")
    if actor is not None and not isinstance(actor, str):
        raise ValueError(f"actor must be a string or None, not {actor!r}")
    when = time.time() if at is None else at
    if isinstance(when, bool) or not isinstance(when, (int, float)) or not math.isfinite(when):
        raise ValueError(f"at must be a finite number of epoch seconds, not {at!r}")
    extra = dict(fields or {})
    clash = sorted(k for k in extra if not isinstance(k, str) or k in RESERVED_FIELDS)
    if clash:
        raise ValueError(f"fields may not set {clash}: the service reads or writes them")
    doc: dict[str, Any] = {**extra, "tenant_id": tenant_id, "type": type, "card_id": card_id,
                           "at": float(when)}
    if actor is not None:
        doc["actor"] = actor
    return doc


def _start(tracer_provider: trace.TracerProvider | None, tenant_id: str, type: str,
           card_id: str) -> trace.Span:
    tracer = trace.get_tracer("board_outbox.producer", tracer_provider=tracer_provider)
    return tracer.start_span(telemetry.SPAN_SEND, kind=SpanKind.PRODUCER, attributes={
        **_SEND, telemetry.ATTR_TENANT: tenant_id, telemetry.ATTR_EVENT_TYPE: type,
        telemetry.ATTR_CARD: card_id})


def _traced(doc: dict[str, Any], span: trace.Span) -> TraceContext | None:
    tc = telemetry.stored(span.get_span_context())
    if tc is not None:
        doc["trace"] = {"traceparent": tc.traceparent, "tracestate": tc.tracestate}
    return tc


def _sent(span: trace.Span, doc: Mapping[str, Any], seq: int, tc: TraceContext | None,
          extra: Mapping[str, Any] | None) -> EmittedEvent:
    span.set_attribute(telemetry.MESSAGING_MESSAGE_ID, telemetry.event_id(doc["tenant_id"], seq))
    span.set_attribute(telemetry.ATTR_SEQ, seq)
    return EmittedEvent(tenant_id=doc["tenant_id"], seq=seq, type=doc["type"],
                        card_id=doc["card_id"], at=doc["at"], actor=doc.get("actor"), trace=tc,
                        fields=dict(extra or {}))


@contextmanager
def _sending(tracer_provider: trace.TracerProvider | None, doc: dict[str, Any]
             ) -> Iterator[tuple[trace.Span, TraceContext | None]]:
    """The PRODUCER span around one event's two writes, ``emit``'s and ``emit_sync``'s alike:
    started and current, its W3C context stored in ``doc``, the document checked before a seq is
    spent on it; a failure is recorded on the span and raised. Yields the span and the context
    stored (None: none was current)."""
    span = _start(tracer_provider, doc["tenant_id"], doc["type"], doc["card_id"])
    with trace.use_span(span, end_on_exit=True, record_exception=False,
                        set_status_on_exception=False):
        tc = _traced(doc, span)
        try:
            check_document(doc)
            yield span, tc
        except Exception as exc:
            _failed(span, exc)
            raise


def _failed(span: trace.Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_attribute("error.type", type(exc).__name__)
    span.set_status(StatusCode.ERROR, str(exc))


async def emit(
    db: AsyncEventsDatabase,
    tenant_id: str,
    type: str,
    card_id: str,
    *,
    actor: str | None = None,
    at: float | None = None,
    fields: Mapping[str, Any] | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> EmittedEvent:
    """Write one board event and return it, seq and trace context included.

    ``db``: the pymongo ``AsyncDatabase`` the service reads (its ``store.database``).
    ``tenant_id``: 1-200 characters from ``A-Z a-z 0-9 _ . : @ -``. ``type``: the event type
    subscriptions match (``card.created``, ``card.moved``, ``card.labeled``, ``card.deleted``...);
    ``card_id``: the card in ``board_cards`` it concerns. ``actor``: who caused it. ``at``: when,
    epoch seconds (default: now). ``fields``: more fields to store with it (the service neither
    reads nor needs them; a reserved name is a ``ValueError``). ``tracer_provider``: default the
    global one.

    Raises ``ValueError`` before anything is written for an argument the service could not
    read; ``StoreUnavailable`` (transient) or ``StoreError`` if the store failed, possibly after
    spending a seq (a hole the service steps over)."""
    doc = _document(tenant_id, type, card_id, actor, at, fields)
    with _sending(tracer_provider, doc) as (span, tc):
        seq = await append(db, doc)
        event = _sent(span, doc, seq, tc, fields)
    return event


def emit_sync(
    db: EventsDatabase,
    tenant_id: str,
    type: str,
    card_id: str,
    *,
    actor: str | None = None,
    at: float | None = None,
    fields: Mapping[str, Any] | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> EmittedEvent:
    """``emit`` on a synchronous pymongo ``Database`` (a web app's request thread, a script):
    the same checks, the same two writes, the same span and stored context."""
    doc = _document(tenant_id, type, card_id, actor, at, fields)
    with _sending(tracer_provider, doc) as (span, tc):
        seq = append_sync(db, doc)
        event = _sent(span, doc, seq, tc, fields)
    return event
