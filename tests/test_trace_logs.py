"""Logs that name their trace (C7): every JSON line written while a span is current carries its
``trace_id`` and ``span_id``; a line outside any span carries none; the OTLP logs export sends
each record with its trace context to a real receiver."""

from __future__ import annotations

import dataclasses
import json
import logging
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import format_span_id, format_trace_id

from board_outbox.adapters.launchers import LogLauncher
from board_outbox.engine.tail.tail import Tail, TailSettings
from board_outbox.engine.work.worker import EffectWorker, WorkerSettings
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.service.logs import JsonFormatter, TraceIds, setup_logging
from board_outbox.service.runtime import build_registry
from board_outbox.service.telemetry import OtlpLogHandler, log_exporter
from tests.support.kits import memory_kit
from tracing.otlp_receiver import SpanSink, http_receiver

pytestmark = pytest.mark.anyio
TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Witness(logging.Handler):
    """Beside the JSON handler: the span current when each record was written (the truth the
    lines are checked against) and the line the JSON formatter made of it."""

    def __init__(self) -> None:
        super().__init__()
        self.addFilter(TraceIds())
        self.setFormatter(JsonFormatter())
        self.seen: list[tuple[trace.SpanContext, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((trace.get_current_span().get_span_context(), self.format(record)))


@pytest.fixture
def witness() -> Iterator[Witness]:
    w = Witness()
    root = logging.getLogger()
    old = root.level
    root.addHandler(w)
    root.setLevel(logging.INFO)
    yield w
    root.removeHandler(w)
    root.setLevel(old)


async def test_every_json_line_inside_a_span_names_it(witness: Witness) -> None:
    """A pipeline that logs inside every kind of span it has -- the drain (a bad trace context
    reported), the execute attempt (the log launcher's line per launch, a retry's warning) --
    and outside any span: 100% of the lines written inside a span carry its ids."""
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    kit = memory_kit()
    stores = dataclasses.replace(kit.stores, launcher=LogLauncher())
    t = f"logs-{random.randrange(10**6)}"
    await kit.sub(Subscription(sub_id="s", tenant_id=t, bot="bot",
                               rule=MatchRule(event_types=("card.created",))))
    await kit.card(t, "c1")
    for trace_doc in ({"traceparent": TP}, {"traceparent": "garbage"}, None):
        seq = await kit.events.allocate_seq(t)
        doc = {"tenant_id": t, "seq": seq, "type": "card.created", "card_id": "c1", "at": 1.0}
        await kit.events.insert(doc if trace_doc is None else {**doc, "trace": trace_doc})
    logging.getLogger("board_outbox.test").info("outside any span")
    tail = Tail(events=kit.events, cursors=kit.cursors, outbox=kit.outbox, subs=kit.subs,
                cards=kit.cards, clock=kit.clock, settings=TailSettings(seed="earliest"),
                tracer_provider=tp)
    await tail.drain_tenant(t)
    worker = EffectWorker(outbox=kit.outbox, registry=build_registry(stores, []), clock=kit.clock,
                          settings=WorkerSettings(), rng=random.Random(1), tracer_provider=tp)
    await worker.tick_any()
    inside = [(ctx, line) for ctx, line in witness.seen if ctx.is_valid]
    outside = [line for ctx, line in witness.seen if not ctx.is_valid]
    assert len(inside) >= 4  # the bad-context line and one line per launch, at least
    assert any("stored trace context" in line for _, line in inside)
    assert sum("launch bot" in line for _, line in inside) == 3
    for ctx, line in inside:
        doc = json.loads(line)
        assert doc["trace_id"] == format_trace_id(ctx.trace_id), line
        assert doc["span_id"] == format_span_id(ctx.span_id), line
    assert outside and all("trace_id" not in json.loads(line) for line in outside)
    # the launch lines name the execute spans the exporter has
    spans = {format_span_id(s.context.span_id) for s in exporter.get_finished_spans()}
    assert all(json.loads(line)["span_id"] in spans for _, line in inside)


def test_setup_logging_stamps_the_ids_on_the_stderr_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The handler ``setup_logging`` installs is the one that stamps them (not only a test's)."""
    setup_logging("json", "INFO")
    tp = TracerProvider()
    with tp.get_tracer("t").start_as_current_span("s") as span:
        logging.getLogger("board_outbox.test").warning("inside")
    logging.getLogger("board_outbox.test").warning("outside")
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    inside, outside = lines[-2], lines[-1]
    assert inside["trace_id"] == format_trace_id(span.get_span_context().trace_id)
    assert inside["span_id"] == format_span_id(span.get_span_context().span_id)
    assert "trace_id" not in outside and "span_id" not in outside


def test_otlp_log_export_carries_the_trace_to_a_real_receiver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = SpanSink(tmp_path / "spans.jsonl")
    with http_receiver(sink) as endpoint:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        import os

        exporter = log_exporter(os.environ)  # the shared endpoint turns logs on
        assert exporter is not None
        provider = LoggerProvider()
        provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
        handler = OtlpLogHandler(provider)
        logger = logging.getLogger("board_outbox.otlp-test")
        logger.addHandler(handler)
        try:
            tp = TracerProvider()
            with tp.get_tracer("t").start_as_current_span("s") as span:
                logger.warning("launch failed for %s", "t/1/sub/s",
                               extra={"tenant_id": "t", "row_key": "t/1/sub/s"})
            logging.getLogger("opentelemetry.test").warning("never exported")  # no feedback loop
            provider.force_flush()
        finally:
            logger.removeHandler(handler)
            provider.shutdown()
    (rec,) = sink.logs()
    assert rec["body"] == "launch failed for t/1/sub/s" and rec["severity"] == "WARNING"
    assert rec["trace_id"] == format_trace_id(span.get_span_context().trace_id)
    assert rec["span_id"] == format_span_id(span.get_span_context().span_id)
    assert rec["attributes"] == {"tenant_id": "t", "row_key": "t/1/sub/s"}


def test_a_record_that_names_its_own_trace_keeps_it() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    record.trace_id, record.span_id = "a" * 32, "b" * 16
    tp = TracerProvider()
    with tp.get_tracer("t").start_as_current_span("s"):
        TraceIds().filter(record)
    doc = json.loads(JsonFormatter().format(record))
    assert (doc["trace_id"], doc["span_id"]) == ("a" * 32, "b" * 16)
