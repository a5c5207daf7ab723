"""W3C trace context in and out, through OpenTelemetry's propagators (C7).

- **Stored contexts** -- an event's ``trace`` (written by its producer) and a row's ``trace``
  (written by the tail) -- are ``{traceparent, tracestate}`` documents, read and written with the
  W3C ``TraceContextTextMapPropagator``. A stored context is data another writer may have
  planted: each one is parsed on its own (``stored_context``), and a bad one costs only its own
  parentage, never the event or the row.
- **Outgoing calls** (a user handler's own calls: ``headers``) carry the current context
  through the global propagator, which ``OTEL_PROPAGATORS`` configures (default: W3C
  ``traceparent``/``tracestate`` and ``baggage``).
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanContext, format_trace_id
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from board_outbox.model.rows import TraceContext

W3C = TraceContextTextMapPropagator()
# W3C Trace Context level 1: a traceparent is 55 characters (a later version may append fields);
# a tracestate "SHOULD" be kept up to 512 characters, and a longer one is dropped whole
MAX_TRACEPARENT = 512
MAX_TRACESTATE = 512

# The propagator and ``TraceState`` log a warning for every bad header they meet. Right for an
# HTTP server; for a planted field read on every batch it is a flood that names no document, so
# while this module reads a stored context their warnings are dropped and the caller reports
# the problem once, naming the document (``stored_context`` returns it).
_reading_stored: ContextVar[bool] = ContextVar("board_outbox_reading_stored", default=False)


class _WhileReadingStored(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _reading_stored.get()


_QUIET = _WhileReadingStored()
for _name in ("opentelemetry.trace.propagation.tracecontext", "opentelemetry.trace.span"):
    logging.getLogger(_name).addFilter(_QUIET)  # a no-op if already there


def stored_context(value: object) -> tuple[SpanContext | None, str | None]:
    """A stored ``trace`` document as (the span context it names, the problem with it).

    ``(None, None)``: no context stored. A traceparent that is missing, not a string or not W3C
    gives no context (the problem says why); a tracestate that is not a string, too long or not
    W3C is dropped and the traceparent kept (the problem says so). Never raises."""
    if value is None:
        return None, None
    if not isinstance(value, dict):
        return None, f"trace is a {type(value).__name__}, not a document"
    parent = value.get("traceparent")
    if parent is None:
        return None, "trace has no traceparent"
    if not isinstance(parent, str):
        return None, f"traceparent is a {type(parent).__name__}, not a string"
    if len(parent) > MAX_TRACEPARENT:
        return None, f"traceparent of {len(parent)} characters (W3C: 55)"
    state = value.get("tracestate")
    problem = None
    if state is not None and not isinstance(state, str):
        problem, state = f"tracestate is a {type(state).__name__}, not a string (dropped)", None
    elif state is not None and len(state) > MAX_TRACESTATE:
        problem, state = (f"tracestate of {len(state)} characters, over {MAX_TRACESTATE} "
                          "(dropped)"), None
    ctx = parse_traceparent(parent, state or "")
    if ctx is None:
        return None, "traceparent is not a W3C traceparent"
    if state and state.strip(" \t,") and not ctx.trace_state:
        problem = "tracestate is not a W3C tracestate (dropped)"
    return ctx, problem


def parse_traceparent(traceparent: str | None, tracestate: str = "") -> SpanContext | None:
    """The remote span context a W3C ``traceparent`` (and ``tracestate``) names, through the
    propagator: exactly its widths of lowercase hex, trace and span ids not all zeros (None:
    not one). ``int(x, 16)`` would also take ``0x`` prefixes, ``_``, upper case and newlines.

    A row's context is read at each attempt and again for its exemplar, the rows of one event
    share one: the results without a tracestate are kept (``_PARSED``, a few thousand), so the
    propagator runs about once per event, and not at all for a context this process wrote."""
    if not traceparent or not isinstance(traceparent, str) or len(traceparent) > MAX_TRACEPARENT:
        return None
    carrier = {"traceparent": traceparent}
    if not tracestate:  # the propagator warns about nothing else (the length is checked above)
        if traceparent in _PARSED:
            return _PARSED[traceparent]
        ctx = trace.get_current_span(W3C.extract(carrier)).get_span_context()
        return _keep(traceparent, ctx if ctx.is_valid else None)
    carrier["tracestate"] = tracestate
    token = _reading_stored.set(True)
    try:
        ctx = trace.get_current_span(W3C.extract(carrier)).get_span_context()
    finally:
        _reading_stored.reset(token)
    return ctx if ctx.is_valid else None


_PARSED: dict[str, SpanContext | None] = {}
_PARSED_MAX = 4096


def _keep(traceparent: str, ctx: SpanContext | None) -> SpanContext | None:
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()  # the rows in flight are recent: a cold start costs one parse each
    _PARSED[traceparent] = ctx
    return ctx


def trace_id_of(traceparent: str) -> str | None:
    """The trace id of a W3C ``traceparent`` (None: not one), e.g. for an exemplar: exactly 32
    lowercase hex digits, not all zeros."""
    ctx = parse_traceparent(traceparent)
    return None if ctx is None else format_trace_id(ctx.trace_id)


def stored(ctx: SpanContext) -> TraceContext | None:
    """The ``trace`` document to store for a span context (None for an invalid one), written by
    the W3C propagator."""
    if not ctx.is_valid:
        return None
    carrier: dict[str, str] = {}
    W3C.inject(carrier, context=trace.set_span_in_context(trace.NonRecordingSpan(ctx)))
    tc = TraceContext(traceparent=carrier["traceparent"], tracestate=carrier.get("tracestate", ""))
    if not tc.tracestate:  # its rows' attempts here read it back without parsing
        _keep(tc.traceparent, trace.SpanContext(ctx.trace_id, ctx.span_id, is_remote=True,
                                                trace_flags=ctx.trace_flags))
    return tc


def trace_context_of(ctx: SpanContext) -> str | None:
    """The W3C ``traceparent`` of a span context, or None for an invalid one."""
    tc = stored(ctx)
    return None if tc is None else tc.traceparent


def trace_context(span: trace.Span) -> str | None:
    """The span's W3C ``traceparent``, or None for a non-recording/invalid span."""
    return trace_context_of(span.get_span_context())


def headers(context: Context | None = None) -> dict[str, str]:
    """The headers an outgoing call carries for ``context`` (default: the current one), through
    the global propagator (``OTEL_PROPAGATORS``; default W3C ``traceparent``, ``tracestate``
    and ``baggage``). Empty when there is no valid context."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    return carrier
