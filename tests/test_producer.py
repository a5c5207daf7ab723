"""The producer API (C7): ``emit`` / ``emit_sync`` allocate the seq, insert the event the
service reads, return it, and store the caller's trace context -- on mongomock and on the wire.
A bad argument raises before a seq is spent; a failed insert leaves a hole the tail steps over."""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import mongomock
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanKind, StatusCode
from pymongo import ASCENDING, MongoClient

import board_outbox.producer as producer
from board_outbox.engine import telemetry
from board_outbox.model.errors import StoreError
from board_outbox.producer import EmittedEvent, emit, emit_sync
from tests.support.kits import mongo_kit

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent
TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(params=["mongomock", pytest.param("wire", marks=pytest.mark.live_mongo)])
async def adb(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """The async database a producer passes: mongomock (behind the suite's async face) or the
    wire server, each with the service's schema."""
    if request.param == "mongomock":
        from board_outbox.adapters.mongo import ensure_schema
        from tests.support.mongomock_async import mock_database

        db = mock_database()
        await ensure_schema(db)
        yield db
        return
    from tests.conftest import live_database

    async with live_database(request.getfixturevalue("live_uri")) as db:
        yield db


@pytest.fixture(params=["mongomock", pytest.param("wire", marks=pytest.mark.live_mongo)])
def sdb(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A synchronous pymongo ``Database`` (or mongomock's), with the events' unique index."""
    if request.param == "mongomock":
        db = mongomock.MongoClient()["producer"]
        db["board_events"].create_index([("tenant_id", ASCENDING), ("seq", ASCENDING)],
                                        unique=True)
        yield db
        return
    client: MongoClient[dict[str, Any]] = MongoClient(request.getfixturevalue("live_uri"))
    name = f"producer_{uuid.uuid4().hex[:10]}"
    db = client[name]
    db["board_events"].create_index([("tenant_id", ASCENDING), ("seq", ASCENDING)], unique=True)
    try:
        yield db
    finally:
        client.drop_database(name)
        client.close()


def recorder() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp, exporter


async def stored(db: Any) -> list[dict[str, Any]]:
    docs = await db["board_events"].find({}, {"_id": 0}).to_list(None)
    return sorted(docs, key=lambda d: (d["tenant_id"], d["seq"]))


async def test_emit_allocates_the_seq_inserts_the_event_and_the_tail_reads_it(adb: Any) -> None:
    first = await emit(adb, "acme", "card.created", "c1", actor="ann", at=100.0,
                       fields={"title": "Ship it", "diff": {"column": ["todo", "doing"]}})
    second = await emit(adb, "acme", "card.moved", "c1")
    other = await emit(adb, "globex", "card.created", "c9")
    assert (first.seq, second.seq, other.seq) == (1, 2, 1)  # one counter per tenant
    assert first == EmittedEvent(tenant_id="acme", seq=1, type="card.created", card_id="c1",
                                 at=100.0, actor="ann", trace=None,
                                 fields={"title": "Ship it", "diff": {"column": ["todo", "doing"]}})
    assert second.actor is None and math.isfinite(second.at) and second.at > 1e9
    counters = {d["_id"]: d["seq"] for d in await adb["board_event_counters"].find({}).to_list(None)}
    assert counters == {"acme": 2, "globex": 1}
    docs = await stored(adb)
    assert docs[0] == {"tenant_id": "acme", "seq": 1, "type": "card.created", "card_id": "c1",
                       "at": 100.0, "actor": "ann", "title": "Ship it",
                       "diff": {"column": ["todo", "doing"]}}
    assert "actor" not in docs[1] and "trace" not in docs[1]  # no context current: none stored
    # the service reads them as it reads any event: the tail materializes both
    from board_outbox.model.board import Card
    from board_outbox.model.subscriptions import MatchRule, Subscription

    kit = mongo_kit(adb, "producer")
    await kit.cards.put(Card(tenant_id="acme", card_id="c1", title="c1", column="todo"))
    await kit.subs.put(Subscription(sub_id="s", tenant_id="acme", bot="bot", rule=MatchRule()))
    res = await kit.tail(seed="earliest").drain_tenant("acme")
    assert (res.materialized, res.cursor_after, res.stopped) == (2, 2, "")
    assert sorted(r.seq for r in await kit.rows("acme")) == [1, 2]


def test_emit_sync_writes_the_same_event_on_a_synchronous_database(sdb: Any) -> None:
    tp, exported = recorder()
    with tp.get_tracer("app").start_as_current_span("request"):
        got = emit_sync(sdb, "acme", "card.labeled", "c1", actor="bob", tracer_provider=tp)
    again = emit_sync(sdb, "acme", "card.labeled", "c2")
    assert (got.seq, again.seq) == (1, 2)
    doc = sdb["board_events"].find_one({"seq": 1}, {"_id": 0})
    (send, _request) = exported.get_finished_spans()
    assert got.trace is not None and doc["trace"] == {
        "traceparent": telemetry.trace_context_of(send.context), "tracestate": ""}
    assert sdb["board_event_counters"].find_one({"_id": "acme"})["seq"] == 2


async def test_the_send_span_is_the_events_creation_context(adb: Any) -> None:
    """A PRODUCER ``send board_events`` span under whatever the caller was doing; the event
    stores its context (and the caller's tracestate), which the service continues."""
    tp, exported = recorder()
    caller = NonRecordingSpan(telemetry.parse_traceparent(TP, "vendor=abc"))  # type: ignore[arg-type]
    with trace.use_span(caller):
        got = await emit(adb, "acme", "card.created", "c1", tracer_provider=tp)
    (send,) = exported.get_finished_spans()
    assert send.name == "send board_events" and send.kind is SpanKind.PRODUCER
    assert send.parent is not None and send.parent.span_id == caller.get_span_context().span_id
    attrs = dict(send.attributes or {})
    assert attrs[telemetry.MESSAGING_SYSTEM] == "board_outbox"
    assert attrs[telemetry.MESSAGING_OPERATION_TYPE] == "send"
    assert attrs[telemetry.MESSAGING_DESTINATION] == "board_events"
    assert attrs[telemetry.MESSAGING_MESSAGE_ID] == "acme/1" and attrs[telemetry.ATTR_SEQ] == 1
    assert got.trace is not None
    assert got.trace.traceparent == telemetry.trace_context_of(send.context)
    assert got.trace.traceparent.split("-")[1] == TP.split("-")[1]
    assert got.trace.tracestate == "vendor=abc"
    (doc,) = await stored(adb)
    assert doc["trace"] == {"traceparent": got.trace.traceparent, "tracestate": "vendor=abc"}


async def test_without_an_sdk_the_callers_context_is_stored_as_it_is(adb: Any) -> None:
    """A producer with the OpenTelemetry API only (no SDK) inside a context it received: the
    event carries that context, so the trace still reaches the bot."""
    caller = NonRecordingSpan(telemetry.parse_traceparent(TP))  # type: ignore[arg-type]
    with trace.use_span(caller):
        got = await emit(adb, "acme", "card.created", "c1",
                         tracer_provider=trace.NoOpTracerProvider())
    assert got.trace is not None and got.trace.traceparent == TP


BAD_ARGS: list[tuple[str, dict[str, Any], str]] = [
    ("tenant-slash", {"tenant_id": "a/b"}, "invalid tenant_id"),
    ("tenant-empty", {"tenant_id": ""}, "invalid tenant_id"),
    ("type-empty", {"type": ""}, "type must be a non-empty string"),
    ("card-int", {"card_id": 7}, "card_id must be a non-empty string"),
    ("actor-int", {"actor": 7}, "actor must be a string"),
    ("at-nan", {"at": float("nan")}, "at must be a finite number"),
    ("at-bool", {"at": True}, "at must be a finite number"),
    ("at-string", {"at": "now"}, "at must be a finite number"),
    ("field-reserved", {"fields": {"seq": 9}}, "fields may not set ['seq']"),
    ("field-trace", {"fields": {"trace": {}}}, "fields may not set ['trace']"),
    ("field-not-bson", {"fields": {"x": object()}}, "not a BSON document"),
    ("field-17mb", {"fields": {"x": "x" * (17 * 1024 * 1024)}}, "over the"),
]


@pytest.mark.parametrize(("case", "change", "message"), BAD_ARGS, ids=[b[0] for b in BAD_ARGS])
async def test_a_bad_argument_raises_before_a_seq_is_spent(
    adb: Any, case: str, change: dict[str, Any], message: str,
) -> None:
    args: dict[str, Any] = {"tenant_id": "acme", "type": "card.created", "card_id": "c1", **change}
    tp, exported = recorder()
    with pytest.raises(ValueError, match=re.escape(message)):
        await emit(adb, tracer_provider=tp, **args)
    assert await adb["board_event_counters"].find_one({"_id": args["tenant_id"]}) is None
    assert await adb["board_events"].count_documents({}) == 0
    for span in exported.get_finished_spans():  # a failure after the span began is on it
        assert span.status.status_code is StatusCode.ERROR


def test_a_bad_argument_raises_before_a_seq_is_spent_sync() -> None:
    db = mongomock.MongoClient()["producer"]
    with pytest.raises(ValueError, match="not a BSON document"):
        emit_sync(db, "acme", "card.created", "c1", fields={"x": {1, 2}})
    assert db["board_event_counters"].count_documents({}) == 0


async def test_a_seq_already_taken_is_a_store_error_naming_it(adb: Any) -> None:
    """A counter behind the log (restored, or edited by hand): the insert collides on the
    unique (tenant, seq) index; one clear error, nothing overwritten."""
    await adb["board_events"].insert_one({"tenant_id": "acme", "seq": 1, "type": "card.created",
                                          "card_id": "c0", "at": 1.0})
    tp, exported = recorder()
    with pytest.raises(StoreError, match="seq 1 of tenant 'acme' is already in board_events"):
        await emit(adb, "acme", "card.created", "c1", tracer_provider=tp)
    (span,) = exported.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"] == "StoreError"
    assert (await emit(adb, "acme", "card.created", "c1")).seq == 2  # the next seq is free
    assert [d["card_id"] for d in await stored(adb)] == ["c0", "c1"]


@pytest.mark.live_mongo
async def test_a_failed_insert_is_a_hole_the_tail_steps_over(live: Any, live_db: Any) -> None:
    """The insert refused by the server (a failpoint): ``emit`` raises, its seq is a hole, and
    the tail materializes the next event once the hole is older than ``young_gap_seconds``."""
    if not live.failpoints():
        pytest.skip("the wire server has no failpoints (test commands disabled)")
    from board_outbox.model.board import Card
    from board_outbox.model.subscriptions import MatchRule, Subscription

    admin: MongoClient[dict[str, Any]] = MongoClient(live.uri)
    admin.admin.command("configureFailPoint", "failCommand", mode={"times": 1}, data={
        "failCommands": ["insert"], "errorCode": 2, "namespace": f"{live_db.name}.board_events"})
    try:
        with pytest.raises(StoreError, match="a hole the service steps over"):
            await emit(live_db, "acme", "card.created", "c1")
    finally:
        admin.admin.command("configureFailPoint", "failCommand", mode="off")
        admin.close()
    after = await emit(live_db, "acme", "card.created", "c1")
    assert after.seq == 2
    kit = mongo_kit(live_db, "producer-hole")
    await kit.cards.put(Card(tenant_id="acme", card_id="c1", title="c1", column="todo"))
    await kit.subs.put(Subscription(sub_id="s", tenant_id="acme", bot="bot", rule=MatchRule()))
    tail = kit.tail(seed="earliest", young_gap_seconds=5.0)
    assert (await tail.drain_tenant("acme")).stopped == "young_gap"  # seq 1 may still land
    kit.clock.advance(6.0)
    res = await tail.drain_tenant("acme")
    assert (res.cursor_after, res.stepped_gaps, res.materialized) == (2, 1, 1)


def test_the_public_face_is_exactly_this() -> None:
    assert sorted(producer.__all__) == sorted([
        "RESERVED_FIELDS", "EmittedEvent", "StoreError", "StoreUnavailable", "TraceContext",
        "emit", "emit_sync"])
    for name in producer.__all__:
        getattr(producer, name)
    # the guide's examples import board-outbox through the producer's face only
    guide = (ROOT / "docs" / "producer-api.md").read_text()
    imports = set(re.findall(r"^from (board_outbox[\w.]*) import", guide, re.M))
    assert imports == {"board_outbox.producer"}
