"""Trace context out (C7): every HTTP launch is a CLIENT span under the row's execute span and
sends that span's ``traceparent``/``tracestate``; a user effect kind gets the row's context in
its ``ExecutionContext`` (``trace_context``, ``trace_headers``)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanKind, StatusCode, format_span_id

from board_outbox.adapters.launchers import HttpLauncher
from board_outbox.engine import telemetry
from board_outbox.engine.handlers.registry import HandlerRegistry
from board_outbox.engine.work.worker import EffectWorker, WorkerSettings
from board_outbox.model.errors import LaunchFailed
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import LaunchRequest
from board_outbox.sdk import ExecutionContext
from tests.support.kits import memory_kit

pytestmark = pytest.mark.anyio
REQ = LaunchRequest(tenant_id="t", bot="b", card_id="c", sub_id="s", seq=1, row_key="t/1/sub/s")
TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def runner() -> Iterator[tuple[str, list[dict[str, str]], list[int]]]:
    """A bot runner that records each request's headers and answers the queued statuses."""
    got: list[dict[str, str]] = []
    statuses: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            got.append({k.lower(): v for k, v in self.headers.items()})
            status = statuses.pop(0) if statuses else 200
            payload = b'{"launch_id": "L-1"}' if status == 200 else b""
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/launch", got, statuses
    server.shutdown()
    server.server_close()


def recorder() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp, exporter


async def test_a_launch_is_a_client_span_whose_context_the_request_carries(runner: Any) -> None:
    url, got, statuses = runner
    tp, exported = recorder()
    launcher = HttpLauncher(url, tracer_provider=tp)
    parent = NonRecordingSpan(telemetry.parse_traceparent(TP, "vendor=abc")  # type: ignore[arg-type]
                              )
    try:
        with trace.use_span(parent):
            assert await launcher.launch(REQ) == "L-1"
            statuses.append(503)
            with pytest.raises(LaunchFailed):
                await launcher.launch(REQ)
    finally:
        await launcher.aclose()
    ok, failed = exported.get_finished_spans()
    for span, headers in ((ok, got[0]), (failed, got[1])):
        assert span.kind is SpanKind.CLIENT and span.name == "POST"
        assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
        # the bot receives this span's context: its own work is a child of the launch
        assert headers["traceparent"] == telemetry.trace_context_of(span.context)
        assert headers["traceparent"].split("-")[1] == TP.split("-")[1]
        assert headers["tracestate"] == "vendor=abc"
        attrs = dict(span.attributes or {})
        assert attrs["http.request.method"] == "POST" and attrs["url.full"] == url
        assert attrs["server.address"] == "127.0.0.1" and isinstance(attrs["server.port"], int)
        assert attrs["board_outbox.row_key"] == REQ.row_key
    assert dict(ok.attributes or {})["http.response.status_code"] == 200
    assert ok.status.status_code is StatusCode.UNSET
    fattrs = dict(failed.attributes or {})
    assert fattrs["http.response.status_code"] == 503 and fattrs["error.type"] == "503"
    assert failed.status.status_code is StatusCode.ERROR


async def test_an_unreachable_runner_is_an_error_span_named_by_its_cause() -> None:
    tp, exported = recorder()
    launcher = HttpLauncher("http://127.0.0.1:9/launch", timeout_seconds=2, tracer_provider=tp)
    try:
        with pytest.raises(LaunchFailed):
            await launcher.launch(REQ)
    finally:
        await launcher.aclose()
    (span,) = exported.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"] == "ClientConnectorError"


async def test_no_trace_no_header(runner: Any) -> None:
    """Tracing off and no context: the request goes out as before, with no trace headers."""
    url, got, _ = runner
    launcher = HttpLauncher(url, tracer_provider=trace.NoOpTracerProvider())
    try:
        await launcher.launch(REQ)
    finally:
        await launcher.aclose()
    assert "traceparent" not in got[0] and got[0]["idempotency-key"] == REQ.row_key


async def test_without_an_sdk_the_stored_context_still_goes_out(runner: Any) -> None:
    """Tracing off in the service, the row storing its producer's context: the launch carries
    that context, so the bot's spans still join the producer's trace."""
    url, got, _ = runner
    off = trace.NoOpTracerProvider()
    launcher = HttpLauncher(url, tracer_provider=off)
    row_trace = telemetry.parse_traceparent(TP)
    assert row_trace is not None
    try:
        with trace.use_span(NonRecordingSpan(row_trace)):
            await launcher.launch(REQ)
    finally:
        await launcher.aclose()
    assert got[0]["traceparent"] == TP


class Recipient:
    """A user effect kind that calls out: what it would send as headers, and its own span."""

    def __init__(self, tp: TracerProvider) -> None:
        self.tracer = tp.get_tracer("user")
        self.seen: list[dict[str, str]] = []

    async def execute(self, row: EffectRow, ctx: ExecutionContext[Any]) -> str:
        self.seen.append(ctx.trace_headers())
        with self.tracer.start_as_current_span("user call", context=ctx.trace_context):
            pass
        return "notified"


async def test_a_user_effect_kind_gets_the_rows_context_in_its_arguments() -> None:
    tp, exported = recorder()
    kit = memory_kit()
    await kit.sub(Subscription(sub_id="n", tenant_id="t", bot="ops@example.com", kind="notify"))
    await kit.card("t", "c1")
    await kit.events.insert({"tenant_id": "t", "seq": await kit.events.allocate_seq("t"),
                             "type": "card.created", "card_id": "c1", "at": 1.0,
                             "trace": {"traceparent": TP, "tracestate": "vendor=abc"}})
    registry = HandlerRegistry()
    handler = Recipient(tp)
    registry.register("notify", handler)
    from board_outbox.engine.tail.tail import Tail, TailSettings

    tail = Tail(events=kit.events, cursors=kit.cursors, outbox=kit.outbox, subs=kit.subs,
                cards=kit.cards, clock=kit.clock, settings=TailSettings(seed="earliest"),
                tracer_provider=tp)
    await tail.drain_tenant("t")
    worker = EffectWorker(outbox=kit.outbox, registry=registry, clock=kit.clock,
                          settings=WorkerSettings(), rng=random.Random(1), tracer_provider=tp)
    await worker.tick_any()
    spans: dict[str, ReadableSpan] = {s.name: s for s in exported.get_finished_spans()}
    execute, user = spans[telemetry.SPAN_EXECUTE], spans["user call"]
    (headers,) = handler.seen
    # the headers name the execute span: the callee's work lands under it, in the producer's trace
    assert headers["traceparent"].split("-")[2] == format_span_id(execute.context.span_id)
    assert headers["traceparent"].split("-")[1] == TP.split("-")[1]
    assert headers["tracestate"] == "vendor=abc"
    assert user.parent is not None and user.parent.span_id == execute.context.span_id
