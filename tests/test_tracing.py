"""OpenTelemetry: the span tree and links (in-memory exporter), OTLP export over HTTP/protobuf and
gRPC to real receivers started here, the waterfall tool, and the metrics (C3, C5)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from board_outbox.engine import telemetry
from board_outbox.engine.handlers.registry import HandlerRegistry
from board_outbox.engine.tail.tail import Tail, TailSettings
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.engine.work.worker import EffectWorker, WorkerSettings
from board_outbox.model.errors import ConfigError
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.service.runtime import build_registry
from board_outbox.service.telemetry import setup_telemetry, span_exporter
from tests.support.kits import Kit, memory_kit
from tracing.otlp_receiver import SpanSink, grpc_receiver, http_receiver
from tracing.waterfall import load, render_text, row_trace
from tracing.waterfall import main as waterfall_main

pytestmark = pytest.mark.anyio
T = "t1"


async def run_pipeline(kit: Kit, tp: TracerProvider, metrics: Metrics | None = None) -> str:
    """One event, one subscription; the first launch fails, the second succeeds."""
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="bot",
                               rule=MatchRule(event_types=("card.created",))))
    await kit.card(T, "c1")
    await kit.emit(T, "card.created", "c1")
    tail = Tail(events=kit.events, cursors=kit.cursors, outbox=kit.outbox, subs=kit.subs,
                cards=kit.cards, clock=kit.clock, settings=TailSettings(seed="earliest"),
                tracer_provider=tp)
    await tail.drain_tenant(T)
    fails = iter([True])
    kit.launcher.fail = lambda _r: next(fails, False)
    reg: HandlerRegistry = build_registry(kit.stores, [])
    worker = EffectWorker(outbox=kit.outbox, registry=reg, clock=kit.clock,
                          settings=WorkerSettings(), rng=random.Random(1), tracer_provider=tp,
                          metrics=metrics)
    await worker.tick_any()
    kit.clock.advance(60)
    await worker.tick_any()
    (row,) = await kit.rows(T)
    assert row.state == "done"
    return row.row_key


async def test_span_tree_links_execution_to_materialization() -> None:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    kit = memory_kit()
    key = await run_pipeline(kit, tp)
    spans = exporter.get_finished_spans()
    (mat,) = [s for s in spans if s.name == telemetry.SPAN_DRAIN]
    execs = sorted((s for s in spans if s.name == telemetry.SPAN_EXECUTE),
                   key=lambda s: s.start_time or 0)
    assert len(execs) == 2
    (row,) = await kit.rows(T)
    assert row.trace is not None
    assert row.trace.traceparent == telemetry.trace_context_of(mat.context)
    # one span event per batch (issue 22): how many rows it wrote and the seqs they cover
    assert [e.name for e in mat.events] == [telemetry.EVENT_ROWS]
    assert dict(mat.events[0].attributes or {}) == {
        telemetry.ATTR_ROWS: 1, telemetry.ATTR_SEQ_FIRST: 1, telemetry.ATTR_SEQ_LAST: 1}
    for attempt, ex in enumerate(execs, start=1):
        assert ex.context.trace_id == mat.context.trace_id  # one trace, end to end
        assert ex.parent is not None and ex.parent.span_id == mat.context.span_id
        assert [ln.context.span_id for ln in ex.links] == [mat.context.span_id]
        attrs = ex.attributes or {}
        assert attrs[telemetry.ATTR_TENANT] == T and attrs[telemetry.ATTR_SEQ] == 1
        assert attrs[telemetry.ATTR_KIND] == "launch" and attrs[telemetry.ATTR_SUB] == "s"
        assert attrs[telemetry.ATTR_ROW_KEY] == key
        assert attrs[telemetry.ATTR_ATTEMPT] == attempt
    assert execs[0].attributes[telemetry.ATTR_OUTCOME] == "retry"  # type: ignore[index]
    assert execs[0].status.status_code is StatusCode.ERROR
    assert any(e.name == "exception" for e in execs[0].events)  # the error is recorded
    assert str(execs[1].attributes[telemetry.ATTR_OUTCOME]).startswith("launched")  # type: ignore[index]


async def test_a_deferral_is_an_event_on_the_execute_span() -> None:
    """F2: a launch over a limit ends its span with outcome ``deferred`` and one event naming
    the limit and the wait; not an error."""
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    kit = memory_kit()
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="bot", max_per_second=1.0))
    await kit.card(T, "c1")
    await kit.emit(T, "card.created", "c1")
    await kit.emit(T, "card.created", "c1")
    await kit.tail(seed="earliest").drain_tenant(T)
    worker = EffectWorker(outbox=kit.outbox, registry=build_registry(kit.stores, []),
                          clock=kit.clock, rng=random.Random(1), tracer_provider=tp)
    assert (await worker.tick_any()).deferred == 1
    execs = [s for s in exporter.get_finished_spans() if s.name == telemetry.SPAN_EXECUTE]
    (deferred,) = [s for s in execs if (s.attributes or {})[telemetry.ATTR_OUTCOME] == "deferred"]
    assert deferred.status.status_code is not StatusCode.ERROR
    (event,) = deferred.events
    assert event.name == telemetry.EVENT_DEFERRED
    attrs = dict(event.attributes or {})
    assert "bot limit (per_second) of bot:t1/bot" in str(attrs[telemetry.ATTR_REASON])
    assert 0 < float(attrs[telemetry.ATTR_WAIT]) <= 1.0  # type: ignore[arg-type]


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_otlp_export_reaches_a_real_receiver(
    protocol: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sink = SpanSink(tmp_path / "spans.jsonl")
    receiver = http_receiver if protocol == "http/protobuf" else grpc_receiver
    with receiver(sink) as endpoint:
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        import os

        exporter = span_exporter(os.environ)
        assert exporter is not None
        tp = TracerProvider()
        tp.add_span_processor(SimpleSpanProcessor(exporter))
        key = await run_pipeline(memory_kit(), tp)
        tp.force_flush()
        spans = sink.wait_for(lambda ss: len(ss) >= 3)
        tp.shutdown()
    names = sorted(s["name"] for s in spans)
    assert names == [telemetry.SPAN_DRAIN, telemetry.SPAN_EXECUTE, telemetry.SPAN_EXECUTE]
    mat = next(s for s in spans if s["name"] == telemetry.SPAN_DRAIN)
    for ex in (s for s in spans if s["name"] == telemetry.SPAN_EXECUTE):
        assert ex["trace_id"] == mat["trace_id"] and ex["parent_span_id"] == mat["span_id"]
        assert ex["links"] == [(mat["trace_id"], mat["span_id"])]
        assert ex["attributes"][telemetry.ATTR_ROW_KEY] == key
    # the file the receiver wrote renders as the row's waterfall
    chain = row_trace(load(tmp_path / "spans.jsonl"), key)
    assert [s.name for s in chain] == [telemetry.SPAN_DRAIN] + [telemetry.SPAN_EXECUTE] * 2
    text = render_text(chain, key)
    assert "drain t1" in text and "execute #1" in text and "execute #2" in text
    assert "outcome=retry" in text and "outcome=launched" in text
    png = tmp_path / "row.png"
    assert waterfall_main([str(tmp_path / "spans.jsonl"), "--row", key, "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_waterfall_reads_a_jaeger_json_export(tmp_path: Path) -> None:
    f = tmp_path / "jaeger.json"
    f.write_text("""{"data": [{"traceID": "ab", "processes": {"p1": {"serviceName": "board-outbox"}},
      "spans": [
        {"traceID": "ab", "spanID": "01", "operationName": "board_outbox.materialize",
         "references": [], "startTime": 1000, "duration": 500, "processID": "p1",
         "tags": [{"key": "board_outbox.tenant_id", "value": "t1"}],
         "logs": [{"fields": [{"key": "board_outbox.row_key", "value": "t1/1/sub/s"}]}]},
        {"traceID": "ab", "spanID": "02", "operationName": "board_outbox.execute",
         "references": [{"refType": "CHILD_OF", "traceID": "ab", "spanID": "01"}],
         "startTime": 2000, "duration": 300, "processID": "p1",
         "tags": [{"key": "board_outbox.row_key", "value": "t1/1/sub/s"},
                  {"key": "board_outbox.attempt", "value": 1},
                  {"key": "board_outbox.outcome", "value": "launched"}]}]}]}""")
    chain = row_trace(load(f), "t1/1/sub/s")
    assert [s.span_id for s in chain] == ["01", "02"]
    assert "execute #1" in render_text(chain, "t1/1/sub/s")


def test_waterfall_finds_the_birth_span_by_its_batch_seq_range(tmp_path: Path) -> None:
    """A row not yet executed: its materialize span is the one whose per-batch event covers the
    row's seq, for the row's tenant (not another tenant's batch over the same seqs)."""
    f = tmp_path / "jaeger.json"
    batch = """{{"traceID": "ab", "spanID": "{sid}", "operationName": "board_outbox.materialize",
         "references": [], "startTime": {start}, "duration": 500, "processID": "p1",
         "tags": [{{"key": "board_outbox.tenant_id", "value": "{tenant}"}}],
         "logs": [{{"fields": [{{"key": "board_outbox.rows", "value": 8}},
                               {{"key": "board_outbox.seq_first", "value": {first}}},
                               {{"key": "board_outbox.seq_last", "value": {last}}}]}}]}}"""
    spans = ",".join([batch.format(sid="01", start=1000, tenant="t2", first=1, last=4),
                      batch.format(sid="02", start=2000, tenant="t1", first=1, last=4),
                      batch.format(sid="03", start=3000, tenant="t1", first=5, last=8)])
    f.write_text('{"data": [{"traceID": "ab", "processes": {"p1": {"serviceName": "b"}}, '
                 f'"spans": [{spans}]}}]}}')
    assert [s.span_id for s in row_trace(load(f), "t1/6/sub/s")] == ["03"]
    assert [s.span_id for s in row_trace(load(f), "t1/4/proj/board-reflect")] == ["02"]
    assert row_trace(load(f), "t1/9/sub/s") == []


@pytest.mark.parametrize(
    ("env", "message"),
    [({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
     ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
      "OTEL_EXPORTER_OTLP_PROTOCOL")],
)
def test_bad_otel_settings_are_config_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        setup_telemetry(env)


def test_no_otel_settings_means_no_exporter() -> None:
    tel = setup_telemetry({})
    assert tel.tracer_provider is None and tel.meter_provider is None


async def test_metrics_record_latency_attempts_dead_letters_and_gauges() -> None:
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    metrics = Metrics(mp.get_meter("test"))
    kit = memory_kit()
    await run_pipeline(kit, TracerProvider(), metrics)
    # a young gap: seq 2 allocated, not inserted -> lag 1 for the tenant after the drain
    await kit.events.allocate_seq(T)
    from board_outbox.service.config import load_config
    from board_outbox.service.runtime import Service

    service = Service(kit.stores, load_config(env={}, tail={"seed": "earliest"}))
    service.metrics = metrics
    await service.refresh_gauges()
    data = reader.get_metrics_data()
    points = {m.name: m.data.data_points for rm in data.resource_metrics
              for sm in rm.scope_metrics for m in sm.metrics}
    (lat,) = points["board_outbox.materialize_to_done"]
    assert lat.count == 1 and lat.sum >= 60  # materialized, failed once, done 60 s later
    (att,) = points["board_outbox.attempts"]
    assert att.sum == 2
    lag = {p.attributes["tenant_id"]: p.value for p in points["board_outbox.tail.lag"]}
    assert lag == {T: 1}
    rows = {p.attributes["state"]: p.value for p in points["board_outbox.rows"]}
    assert rows == {"done": 1, "pending": 0, "claimed": 0, "failed": 0, "coalesced": 0,
                    "cancelled": 0}


def test_the_shared_endpoint_turns_on_every_signal_and_none_turns_one_off() -> None:
    """The specification: ``OTEL_EXPORTER_OTLP_ENDPOINT`` applies to traces, metrics and logs
    alike; ``OTEL_<SIGNAL>_EXPORTER=none`` turns one off (Jaeger takes traces only)."""
    from board_outbox.service.telemetry import log_exporter, metric_exporter

    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    assert span_exporter(env) is not None
    assert metric_exporter(env) is not None and log_exporter(env) is not None
    off = {**env, "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"}
    assert span_exporter(off) is not None
    assert metric_exporter(off) is None and log_exporter(off) is None
    # a per-signal endpoint turns on its own signal only
    only = {"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://127.0.0.1:9/v1/logs"}
    assert log_exporter(only) is not None
    assert span_exporter(only) is None and metric_exporter(only) is None
