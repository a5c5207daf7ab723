"""Trace context in (C7): an event's stored producer context is continued by its rows, through a
``materialize`` span per event; an event without one starts its trace at the batch; a bad one
costs only the event's parentage. On the memory twins and mongomock (the tail's read path of
the Mongo adapter, projection included); the wire proof is tests/test_trace_wire.py."""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import DEFAULT_ON
from opentelemetry.trace import SpanKind, format_span_id, format_trace_id

from board_outbox.engine import telemetry
from board_outbox.engine.tail.tail import Tail, TailSettings
from board_outbox.engine.work.worker import EffectWorker, WorkerSettings
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.service.runtime import build_registry
from tests.support.kits import Kit, memory_kit, mongo_kit

pytestmark = pytest.mark.anyio
T = "t1"
TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(params=["memory", "mongomock"])
async def side(request: pytest.FixtureRequest) -> AsyncIterator[Kit]:
    if request.param == "memory":
        yield memory_kit()
        return
    from board_outbox.adapters.mongo import ensure_schema
    from tests.support.mongomock_async import mock_database

    db = mock_database()
    await ensure_schema(db)
    yield mongo_kit(db, "mongomock")


def recorder(**kw: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider(**kw)
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp, exporter


async def event(kit: Kit, seq_card: str = "c1", trace_doc: object = None, t: str = T) -> int:
    seq = await kit.events.allocate_seq(t)
    doc: dict[str, Any] = {"tenant_id": t, "seq": seq, "type": "card.created",
                           "card_id": seq_card, "at": kit.clock.now()}
    if trace_doc is not None:
        doc["trace"] = trace_doc
    await kit.insert_raw_event(doc)
    return seq


def produced(tp: TracerProvider, state: str = "") -> tuple[ReadableSpan | None, dict[str, str]]:
    """A producer's span (ended) and the ``trace`` document it would store."""
    span = tp.get_tracer("producer").start_span("send board_events", kind=SpanKind.PRODUCER)
    span.end()
    doc = {"traceparent": telemetry.trace_context(span) or ""}
    if state:
        doc["tracestate"] = state
    return span if isinstance(span, ReadableSpan) else None, doc


async def pipeline(kit: Kit, tp: trace.TracerProvider, t: str = T) -> tuple[Tail, EffectWorker]:
    await kit.sub(Subscription(sub_id="s", tenant_id=t, bot="bot",
                               rule=MatchRule(event_types=("card.created",))))
    await kit.card(t, "c1")
    await kit.card(t, "c2")
    registry = build_registry(kit.stores, ["board-reflect"])
    tail = Tail(events=kit.events, cursors=kit.cursors, outbox=kit.outbox, subs=kit.subs,
                cards=kit.cards, clock=kit.clock, settings=TailSettings(seed="earliest"),
                projections=registry.projections, tracer_provider=tp)
    worker = EffectWorker(outbox=kit.outbox, registry=registry, clock=kit.clock,
                          settings=WorkerSettings(), rng=random.Random(1), tracer_provider=tp)
    return tail, worker


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def rows_of(rows: list[EffectRow], seq: int) -> list[EffectRow]:
    return sorted((r for r in rows if r.seq == seq), key=lambda r: r.row_key)


async def test_an_events_rows_continue_its_producers_trace(side: Kit) -> None:
    kit = side
    tp, exported = recorder()
    tail, worker = await pipeline(kit, tp)
    producer, doc = produced(tp, state="vendor=abc")
    assert producer is not None
    traced = await event(kit, "c1", doc)
    plain = await event(kit, "c2")
    await tail.drain_tenant(T)
    await worker.tick_any()
    spans = exported.get_finished_spans()
    (drain,) = named(spans, telemetry.SPAN_DRAIN)
    (mat,) = named(spans, telemetry.SPAN_MATERIALIZE)  # the plain event gets none
    rows = await kit.rows(T)

    # the batch: a CONSUMER process span, the root of its own trace
    assert drain.kind is SpanKind.CONSUMER and drain.parent is None
    attrs = dict(drain.attributes or {})
    assert attrs[telemetry.MESSAGING_SYSTEM] == "board_outbox"
    assert attrs[telemetry.MESSAGING_OPERATION_TYPE] == "process"
    assert attrs[telemetry.MESSAGING_DESTINATION] == "board_events"
    assert attrs[telemetry.MESSAGING_BATCH_COUNT] == 2
    # the event: a child of the producer's span, linked to it and to the batch
    assert mat.kind is SpanKind.CONSUMER
    assert mat.context.trace_id == producer.context.trace_id
    assert mat.parent is not None and mat.parent.span_id == producer.context.span_id
    assert [ln.context.span_id for ln in mat.links] == [producer.context.span_id,
                                                       drain.context.span_id]
    mattrs = dict(mat.attributes or {})
    assert mattrs[telemetry.MESSAGING_MESSAGE_ID] == f"{T}/{traced}"
    assert sorted(mattrs[telemetry.ATTR_ROW_KEYS]) == [r.row_key for r in rows_of(rows, traced)]
    assert mat.context.trace_state.get("vendor") == "abc"  # the tracestate rides along
    # its rows (the launch and the projection) store the event's span, tracestate included
    for row in rows_of(rows, traced):
        assert row.trace is not None
        assert row.trace.traceparent == telemetry.trace_context_of(mat.context)
        assert row.trace.tracestate == "vendor=abc"
    # the plain event's rows store the batch's span, as rows always have
    for row in rows_of(rows, plain):
        assert row.trace is not None
        assert row.trace.traceparent == telemetry.trace_context_of(drain.context)
    # every execute attempt: a CONSUMER child of the span its row stores, the row key its id
    execs = named(spans, telemetry.SPAN_EXECUTE)
    assert len(execs) == 4
    for ex in execs:
        eattrs = dict(ex.attributes or {})
        key = eattrs[telemetry.ATTR_ROW_KEY]
        assert eattrs[telemetry.MESSAGING_MESSAGE_ID] == key
        assert eattrs[telemetry.MESSAGING_DESTINATION] == "trigger_effects"
        assert ex.kind is SpanKind.CONSUMER
        parent = mat if eattrs[telemetry.ATTR_SEQ] == traced else drain
        assert ex.parent is not None and ex.parent.span_id == parent.context.span_id
        assert ex.context.trace_id == parent.context.trace_id


async def test_without_an_sdk_the_producers_context_still_reaches_the_rows(side: Kit) -> None:
    """Tracing off in the service (the API's no-op): nothing is recorded, and the rows store
    the producer's own context, so the launch still carries it to the bot."""
    kit = side
    tail, _ = await pipeline(kit, trace.NoOpTracerProvider())
    seq = await event(kit, "c1", {"traceparent": TP, "tracestate": "v=1"})
    await tail.drain_tenant(T)
    for row in rows_of(await kit.rows(T), seq):
        assert row.trace is not None
        assert (row.trace.traceparent, row.trace.tracestate) == (TP, "v=1")


async def test_a_producer_that_sampled_out_gets_no_spans_from_the_service(side: Kit) -> None:
    """Parent-based sampling follows the producer's decision: a not-sampled context records
    nothing downstream, and its rows keep it (flags 00), so their attempts record nothing."""
    kit = side
    tp, exported = recorder(sampler=DEFAULT_ON)
    tail, worker = await pipeline(kit, tp)
    unsampled = TP[:-2] + "00"
    seq = await event(kit, "c1", {"traceparent": unsampled})
    await tail.drain_tenant(T)
    await worker.tick_any()
    spans = exported.get_finished_spans()
    assert named(spans, telemetry.SPAN_MATERIALIZE) == []
    assert named(spans, telemetry.SPAN_EXECUTE) == []
    assert [s.name for s in spans] == [telemetry.SPAN_DRAIN]
    for row in rows_of(await kit.rows(T), seq):
        assert row.trace is not None and row.trace.traceparent.endswith("-00")
        assert row.trace.traceparent.split("-")[1] == TP.split("-")[1]


BAD = [
    ("a-string", "00-" + "c" * 32, False),
    ("a-list", [{"traceparent": TP}], False),
    ("a-number", 42, False),
    ("no-traceparent", {"tracestate": "a=b"}, False),
    ("traceparent-int", {"traceparent": 7}, False),
    ("traceparent-garbage", {"traceparent": "0x" + "c" * 50}, False),
    ("traceparent-upper", {"traceparent": TP.upper()}, False),
    ("traceparent-zero-trace", {"traceparent": f"00-{'0' * 32}-b7ad6b7169203331-01"}, False),
    ("traceparent-1mb", {"traceparent": "0" * 1_000_000}, False),
    ("traceparent-version-ff", {"traceparent": "ff" + TP[2:]}, False),
    ("tracestate-huge", {"traceparent": TP, "tracestate": "k=" + "v" * 10_000}, True),
    ("tracestate-int", {"traceparent": TP, "tracestate": 5}, True),
    ("tracestate-garbage", {"traceparent": TP, "tracestate": "no state,\n=="}, True),
]


@pytest.mark.parametrize(("case", "stored", "keeps_parent"), BAD, ids=[b[0] for b in BAD])
async def test_a_bad_trace_costs_only_its_events_parentage(
    side: Kit, case: str, stored: object, keeps_parent: bool, caplog: pytest.LogCaptureFixture,
) -> None:
    """Each event's context is parsed on its own: a bad one is reported once (naming the event)
    and its rows join the batch's trace -- or keep the parent when only the tracestate was bad.
    The event itself, and a good one beside it, launch as ever."""
    kit = side
    t = f"t-{kit.name}-{case}-{random.randrange(10**6)}"  # the once-per-problem lines are per process
    tp, exported = recorder()
    tail, worker = await pipeline(kit, tp, t)
    caplog.set_level(logging.WARNING, logger="board_outbox")
    bad = await event(kit, "c1", stored, t)
    good = await event(kit, "c2", {"traceparent": TP}, t)
    await tail.drain_tenant(t)
    await tail.drain_tenant(t)  # nothing new: no second line
    await worker.tick_any()
    launched = {r.seq for r in kit.launcher.launches}
    assert launched == {bad, good}
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and f"event {t}/{bad}: stored trace context" in lines[0], lines
    assert len(lines[0]) < 3000  # a 1 MB field is not quoted
    spans = exported.get_finished_spans()
    drain = named(spans, telemetry.SPAN_DRAIN)[0]
    mats = {dict(s.attributes or {})[telemetry.ATTR_SEQ]: s
            for s in named(spans, telemetry.SPAN_MATERIALIZE)}
    assert good in mats and format_trace_id(mats[good].context.trace_id) == TP.split("-")[1]
    rows = await kit.rows(t)
    assert len(rows) == 4
    for row in rows_of(rows, bad):
        assert row.trace is not None
        if keeps_parent:
            assert format_trace_id(mats[bad].context.trace_id) == TP.split("-")[1]
            assert row.trace.traceparent == telemetry.trace_context_of(mats[bad].context)
            assert row.trace.tracestate == ""
        else:
            assert bad not in mats
            assert row.trace.traceparent.split("-")[2] == format_span_id(drain.context.span_id)
