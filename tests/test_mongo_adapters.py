"""Mongo-specific behaviour: error classification, schema, client config (CI, no server needed),
and the change stream (real replica set only)."""

from __future__ import annotations

import uuid

import pytest
from pymongo.errors import (
    AutoReconnect,
    DuplicateKeyError,
    NetworkTimeout,
    NotPrimaryError,
    OperationFailure,
    ServerSelectionTimeoutError,
)

from board_outbox.adapters.mongo import MongoEventLog, ensure_schema
from board_outbox.adapters.mongo.errors import classify, translated
from board_outbox.adapters.mongo.schema import DONE_TTL_SECONDS
from board_outbox.model import transitions as tr
from board_outbox.model.errors import ConfigError, StoreError, StoreUnavailable
from board_outbox.ports import RowFilter
from board_outbox.service.backends import mongo_client
from board_outbox.service.config_sections import StoreConfig
from tests.support.mongomock_async import mock_database

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "exc",
    [
        AutoReconnect("connection reset"),
        NetworkTimeout("timed out"),
        NotPrimaryError("not primary"),
        ServerSelectionTimeoutError("no servers"),
        OperationFailure("stepped down", code=189),
        OperationFailure("interrupted", code=11602),
        OperationFailure("time limit", code=50),
    ],
)
def test_transient_pymongo_errors_become_store_unavailable(exc: Exception) -> None:
    assert isinstance(classify(exc, "op"), StoreUnavailable)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "exc",
    [OperationFailure("unauthorized", code=13), DuplicateKeyError("dup", code=11000),
     OperationFailure("bad query", code=2)],
)
def test_other_pymongo_errors_become_store_error(exc: Exception) -> None:
    err = classify(exc, "op")  # type: ignore[arg-type]
    assert isinstance(err, StoreError) and not isinstance(err, StoreUnavailable)


async def test_translated_lets_no_raw_pymongo_error_out() -> None:
    class Flaky:
        @translated
        async def op(self) -> None:
            raise AutoReconnect("boom")

    with pytest.raises(StoreUnavailable, match=r"Flaky\.op: AutoReconnect: boom"):
        await Flaky().op()


async def test_adapter_translates_a_failing_driver_call() -> None:
    class DeadCollection:
        def find(self, *a: object, **k: object) -> object:
            raise ServerSelectionTimeoutError("no primary")

    class DeadDb:
        def __getitem__(self, name: str) -> DeadCollection:
            return DeadCollection()

    with pytest.raises(StoreUnavailable, match="no primary"):
        await MongoEventLog(DeadDb()).read_after("t", 0, 10)


async def test_ensure_schema_is_idempotent_and_has_the_ttl_and_unique_indexes() -> None:
    db = mock_database()
    await ensure_schema(db)
    await ensure_schema(db)  # again: no error, nothing duplicated
    info = await db["trigger_effects"].index_information()
    assert info["row_key_unique"]["unique"] is True
    # the hot queries' indexes are partial: each holds only the rows in its state (issue 29)
    for name, key, state in (("pending_not_before", ["not_before"], "pending"),
                             ("claimed_lease_until", ["lease_until"], "claimed"),
                             ("failed_updated_at_row_key", ["updated_at", "row_key"], "failed")):
        assert list(info[name]["key"]) == [(k, 1) for k in key]
        assert info[name]["partialFilterExpression"] == {"state": state}
    assert "failed_updated_at" not in info  # its prefix serves what it served
    assert list(info["tenant_seq"]["key"]) == [("tenant_id", 1), ("seq", 1)]
    ttl = info["done_ttl"]
    assert ttl["expireAfterSeconds"] == DONE_TTL_SECONDS == 7 * 24 * 3600
    assert ttl["partialFilterExpression"] == {"state": "done"}  # failed rows never expire
    assert (await db["board_events"].index_information())["tenant_seq_unique"]["unique"]


def test_client_passes_uri_options_through_and_applies_timeouts() -> None:
    client = mongo_client(StoreConfig(
        uri="mongodb://u:p@127.0.0.1:1/?replicaSet=rs0&tls=true&tlsAllowInvalidCertificates=true",
        op_timeout_seconds=7))
    opts = client.options
    assert opts.replica_set_name == "rs0" and opts.timeout == 7.0
    assert opts.pool_options._ssl_context is not None  # TLS configured from the URI


@pytest.mark.parametrize("uri", ["http://nope", "mongodb://h:notaport/"])
def test_bad_uri_is_a_config_error(uri: str) -> None:
    with pytest.raises(ConfigError, match="store"):
        mongo_client(StoreConfig(uri=uri))


async def test_done_rows_expire_and_dead_letters_never_do() -> None:
    """M11b on mongomock, which runs TTL expiry on read: a done row whose done_at is older than
    7 days disappears; a failed row of the same age stays (it never carries done_at, and the
    TTL index is partial on state=done besides)."""
    from board_outbox.adapters.mongo import MongoEffectOutbox
    from board_outbox.model.board import EventSnapshot
    from board_outbox.model.rows import ErrorEntry, new_launch_row
    from board_outbox.model.subscriptions import Subscription

    db = mock_database()
    await ensure_schema(db)
    outbox = MongoEffectOutbox(db)
    sub = Subscription(sub_id="s", tenant_id="t", bot="b")
    rows = [new_launch_row("t", EventSnapshot(seq=i, type="x", card_id="c"), sub, 0.0)
            for i in (1, 2, 3)]
    await outbox.upsert_rows(rows)
    import time

    long_ago = time.time() - DONE_TTL_SECONDS - 3600
    c1, c2, c3 = await outbox.claim_any(long_ago, 30, 3)
    assert await outbox.apply_claimed(c1.ref, c1.claim_id, tr.done(now=long_ago, outcome="ok"))
    err = ErrorEntry(attempt=1, at=long_ago, error="x")
    assert await outbox.apply_claimed(
        c2.ref, c2.claim_id, tr.park(now=long_ago, error=err, count_attempt=True))
    assert await outbox.apply_claimed(c3.ref, c3.claim_id, tr.done(now=time.time(), outcome="ok"))
    left = {r.seq: r.state for r in await outbox.find(RowFilter(tenant_id="t"))}
    assert left == {2: "failed", 3: "done"}


async def test_coalesced_rows_expire_like_done_rows() -> None:
    """Issue 33 on mongomock (TTL expiry on read): a coalesced row is history like a done row --
    ``coalesced_ttl`` expires it 7 days after its ``done_at``; a newer one stays."""
    import time

    from board_outbox.adapters.mongo import MongoEffectOutbox
    from board_outbox.model.board import EventSnapshot
    from board_outbox.model.rows import new_launch_row
    from board_outbox.model.subscriptions import Coalesce, Subscription

    db = mock_database()
    await ensure_schema(db)
    ttl = (await db["trigger_effects"].index_information())["coalesced_ttl"]
    assert ttl["expireAfterSeconds"] == DONE_TTL_SECONDS
    assert ttl["partialFilterExpression"] == {"state": "coalesced"}
    outbox = MongoEffectOutbox(db)
    sub = Subscription(sub_id="s", tenant_id="t", bot="b",
                       coalesce=Coalesce(quiet_seconds=1.0, max_wait_seconds=10.0))
    rows = [new_launch_row("t", EventSnapshot(seq=i, type="x", card_id="c"), sub, 0.0)
            for i in (1, 2, 3)]
    await outbox.upsert_rows(rows)
    long_ago = time.time() - DONE_TTL_SECONDS - 3600
    c1, c2, c3 = await outbox.claim_any(long_ago, 30, 3)
    into = rows[2].row_key
    assert await outbox.apply_claimed(c1.ref, c1.claim_id, tr.coalesce(now=long_ago, into=into))
    assert await outbox.apply_claimed(c2.ref, c2.claim_id, tr.coalesce(now=time.time(), into=into))
    assert await outbox.apply_claimed(c3.ref, c3.claim_id, tr.done(now=time.time(), outcome="ok"))
    left = {r.seq: r.state for r in await outbox.find(RowFilter(tenant_id="t"))}
    assert left == {2: "coalesced", 3: "done"}


async def test_new_rows_are_stored_slim_and_read_back_whole() -> None:
    """Issue 22: a new row's document leaves out the fields at their zero value (fewer bytes to
    encode and store); every reader gets the same row back, and the first write of a row key
    still wins ($setOnInsert: a second materialization changes nothing)."""
    from board_outbox.adapters.mongo import MongoEffectOutbox
    from board_outbox.model.board import EventSnapshot
    from board_outbox.model.rows import TraceContext, new_launch_row, new_projection_row
    from board_outbox.model.subscriptions import Subscription

    db = mock_database()
    await ensure_schema(db)
    outbox = MongoEffectOutbox(db)
    ev = EventSnapshot(seq=7, type="card.moved", card_id="c", column="done", labels=("x",))
    launch = new_launch_row("t", ev, Subscription(sub_id="s", tenant_id="t", bot="b"), 5.0,
                            TraceContext(traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01"))
    proj = new_projection_row("t", ev, "board-reflect", 5.0)
    assert (await outbox.upsert_rows([launch, proj])).inserted == 2
    stored = {d["row_key"]: d for d in await db["trigger_effects"].find({}).to_list(None)}
    for doc in stored.values():
        for zero in ("attempts", "claim_id", "lease_until", "consume_marked", "errors", "audit",
                     "outcome", "done_at"):
            assert zero not in doc, zero
        assert "deleted" not in doc["event"] and "actor" not in doc["event"]
        assert doc["state"] == "pending" and doc["not_before"] == 5.0  # the claim query's fields
    assert "projection" not in stored[launch.row_key] and "trace" in stored[launch.row_key]
    assert "sub_id" not in stored[proj.row_key] and "trace" not in stored[proj.row_key]
    back = {r.row_key: r for r in await outbox.find(RowFilter(tenant_id="t"))}
    assert back == {launch.row_key: launch, proj.row_key: proj}
    later = new_projection_row("t", ev, "board-reflect", 99.0)
    assert (await outbox.upsert_rows([later])).inserted == 0
    assert (await outbox.find(RowFilter(tenant_id="t", kind="projection")))[0].created_at == 5.0
    (claim,) = await outbox.claim_any(6.0, 30, 1, tenants=["t"])  # the slim row is claimable
    assert claim.row is not None and claim.row.seq == 7


async def test_event_reads_fetch_only_the_fields_an_event_is_read_for() -> None:
    """Issue 22: a board's own extra fields on an event (payloads, diffs) are not fetched."""
    db = mock_database()
    log = MongoEventLog(db)
    await db["board_events"].insert_one({"tenant_id": "t", "seq": 1, "type": "card.created",
                                         "card_id": "c", "at": 1.0, "actor": "ann",
                                         "payload": "x" * 10_000, "diff": {"a": 1}})
    (rec,) = await log.read_after("t", 0, 10)
    assert rec.doc == {"tenant_id": "t", "seq": 1, "type": "card.created", "card_id": "c",
                       "at": 1.0, "actor": "ann"}


def test_each_states_filter_implies_its_partial_index_and_bounds_its_key() -> None:
    """T1, statically: ``IN_STATE`` (the filter every count, distinct, status and listing of one
    state goes through) names the state of a partial index and bounds that index's key, with a
    range every well-formed value falls in (any number; any date)."""
    from datetime import UTC, datetime

    from board_outbox.adapters.mongo.outbox.statements import IN_STATE
    from board_outbox.adapters.mongo.schema import INDEXES

    partial: dict[str, set[str]] = {}  # state -> the leading keys of its partial indexes
    for m in INDEXES["trigger_effects"]:
        # the indexes of one state (the coalescing index is partial on ``burst_at`` instead)
        if "state" in m.document.get("partialFilterExpression", {}):
            partial.setdefault(m.document["partialFilterExpression"]["state"], set()).add(
                next(iter(m.document["key"])))
    assert set(IN_STATE) == set(partial) == {"pending", "claimed", "failed", "done",
                                             "coalesced", "cancelled"}
    for state, flt in IN_STATE.items():
        assert flt["state"] == state
        (field,) = partial[state] & set(flt)  # one of its indexes leads with the bounded key
        bound = flt[field]
        assert isinstance(bound, dict) and set(bound) == {"$gte"}, (state, flt)
        low = bound["$gte"]
        assert low == float("-inf") or low == datetime(1970, 1, 1, tzinfo=UTC), (state, low)


async def test_every_hot_statement_naming_a_state_constrains_that_states_index_key(
    live_uri: str,
) -> None:
    """T1: a planner uses a partial index only for a query that constrains its key, so a bare
    ``{state: X}`` scans the collection, the week of done history included. Every filter the
    production adapter sends for the claim, the reclaim, the gauges, the status refresh and the
    dead-letter listing is captured on the wire, and each clause naming one state must also
    bound that state's index key."""
    from pymongo import AsyncMongoClient, monitoring

    from board_outbox.adapters.mongo import MongoEffectOutbox
    from board_outbox.adapters.mongo.schema import INDEXES
    from board_outbox.adapters.mongo.status import MongoStatusStore
    from board_outbox.model.rows import EffectRow

    class Sent(monitoring.CommandListener):
        def __init__(self) -> None:
            self.filters: list[tuple[str, dict[str, object]]] = []

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            cmd = event.command
            if cmd.get(event.command_name) != "trigger_effects":
                return
            name = event.command_name
            if name in ("find", "count", "distinct"):
                self.filters.append((name, dict(cmd.get("filter") or cmd.get("query") or {})))
            elif name == "aggregate":
                for stage in cmd.get("pipeline", []):
                    if "$match" in stage:
                        self.filters.append((name, dict(stage["$match"])))

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    keys: dict[str, set[str]] = {}  # state -> the fields its partial indexes are keyed on
    for m in INDEXES["trigger_effects"]:
        if "state" in m.document.get("partialFilterExpression", {}):
            keys.setdefault(m.document["partialFilterExpression"]["state"], set()).update(
                m.document["key"])
    sent = Sent()
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        live_uri, tz_aware=True, event_listeners=[sent])
    db = client[f"board_outbox_test_hot_{uuid.uuid4().hex[:8]}"]
    try:
        await ensure_schema(db)
        outbox, status = MongoEffectOutbox(db), MongoStatusStore(db)
        rows = [EffectRow(tenant_id=f"t{i % 3}", seq=i, row_key=f"t{i % 3}/{i}/sub/s", sub_id="s",
                          created_at=1.0, updated_at=1.0, not_before=1.0) for i in range(1, 13)]
        await outbox.upsert_rows(rows)
        await outbox.claim_any(100.0, 30.0, 2)  # fills its window: the second query runs too
        await outbox.reclaim_expired(10_000.0, 30.0, 5)
        await outbox.count_by_state(states=["pending", "claimed", "failed", "done", "coalesced"])
        await outbox.count_by_state("t1", states=["pending", "done"])
        await outbox.live_tenants()
        await status.row_summary(("pending", "claimed", "failed"))
        await outbox.find(RowFilter(states=["failed"], limit=10))
        await outbox.stuck_rows(100.0, 100)  # the sweep, every minute on every replica
        # a bulk replay's walk over the dead-letters, first page and a later one
        await outbox.failed_page(RowFilter(tenant_id="t1", states=("failed",), limit=5))
        await outbox.failed_page(RowFilter(states=("failed",), updated_before=9.0, limit=5),
                                 after=(1.0, "t1/1/sub/s"))
    finally:
        await client.drop_database(db.name)
        await client.close()
    assert len(sent.filters) >= 10

    def clauses(flt: dict[str, object]) -> list[dict[str, object]]:
        """``{A, $or: [B, C]}`` is ``{A, B}`` or ``{A, C}``: each branch with the fields beside it."""
        ors = flt.get("$or")
        if not isinstance(ors, list):
            return [flt]
        beside = {k: v for k, v in flt.items() if k != "$or"}
        return [{**beside, **dict(c)} for c in ors]

    checked = 0
    # the fields of the indexes on every row: a clause without one state must bound one of them
    # (an empty count is the collection's metadata count)
    whole = {"_id", "row_key", "tenant_id"}
    for name, flt in sent.filters:
        if name == "count" and not flt:
            continue
        for clause in clauses(flt):
            state = clause.get("state")
            if not isinstance(state, str) or state not in keys:
                assert whole & set(clause), (name, clause)  # e.g. a bare {state: {$nin: ...}}
                continue
            checked += 1
            assert keys[state] & set(clause), (name, clause, keys[state])
    assert checked >= 10


async def test_the_priority_query_runs_only_under_a_backlog_on_the_wire(live_uri: str) -> None:
    """Issue 33: the pick's third query (due rows of a priority above 0) costs a round trip only
    when the window fills: an idle pick is one find, a pick that sees every due row is one find
    plus its claim write, a backlogged one three finds plus the write -- and that third find is
    what takes a high-priority row newer than the window first."""
    from pymongo import AsyncMongoClient, monitoring

    from board_outbox.adapters.mongo import MongoEffectOutbox
    from board_outbox.model.rows import EffectRow

    class Finds(monitoring.CommandListener):
        def __init__(self) -> None:
            self.names: list[str] = []

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command.get(event.command_name) == "trigger_effects":
                self.names.append(event.command_name)

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    sent = Finds()
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        live_uri, tz_aware=True, event_listeners=[sent])
    db = client[f"board_outbox_test_prio_{uuid.uuid4().hex[:8]}"]
    try:
        await ensure_schema(db)
        outbox = MongoEffectOutbox(db)

        async def claim(limit: int) -> list[tuple[int, int]]:
            sent.names.clear()
            got = await outbox.claim_any(100.0, 30.0, limit)
            return [(c.row.seq, c.row.priority) for c in got if c.row is not None]

        assert await claim(5) == [] and sent.names == ["find"]  # idle: one find
        rows = [EffectRow(tenant_id="t", seq=i, row_key=f"t/{i}/sub/s", sub_id="s",
                          created_at=1.0, updated_at=1.0, not_before=float(i),
                          priority=7 if i > 10 else 0) for i in range(1, 13)]
        await outbox.upsert_rows(rows)
        assert await claim(2) == [(11, 7), (12, 7)]  # newer than the window, first
        assert sent.names == ["find", "find", "find", "update"]
        assert await claim(20) == [(i, 0) for i in range(1, 11)]  # all seen: one find
        assert sent.names == ["find", "update"]
    finally:
        await client.drop_database(db.name)
        await client.close()


async def test_the_sweep_finds_an_unknown_state_anywhere_in_a_rolling_scan(
    live_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R2 without a full scan: a state outside the enum has no index, so the sweep reads the
    ``_id`` index a chunk at a time. With a chunk of 3 over 12 rows, a weird row minted last and
    one planted with a string ``_id`` are both found within one lap (5 sweeps), and the lap
    starts over."""
    from bson import ObjectId
    from pymongo import AsyncMongoClient

    from board_outbox.adapters.mongo import MongoEffectOutbox
    from board_outbox.adapters.mongo.outbox import sweep as mongo_outbox

    monkeypatch.setattr(mongo_outbox, "SCAN_CHUNK", 3)
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(live_uri, tz_aware=True)
    db = client[f"board_outbox_test_sweep_{uuid.uuid4().hex[:8]}"]
    try:
        await ensure_schema(db)
        coll = db["trigger_effects"]
        await coll.insert_many([{"_id": ObjectId(), "row_key": f"t/{i}/sub/s", "tenant_id": "t",
                                 "state": "done", "seq": i} for i in range(10)])
        weird = ObjectId()
        await coll.insert_one({"_id": weird, "row_key": "t/98/sub/s", "tenant_id": "t",
                               "state": "weird", "seq": 98})
        await coll.insert_one({"_id": "planted", "row_key": "t/99/sub/s", "tenant_id": "t",
                               "seq": 99})  # no state at all
        outbox = MongoEffectOutbox(db)
        found: list[object] = []
        for _ in range(5):
            found += [ref for ref, _doc in await outbox.stuck_rows(100.0, 100)]
        assert sorted(map(str, found)) == sorted([str(weird), "planted"])
        again = [ref for _ in range(5) for ref, _doc in await outbox.stuck_rows(100.0, 100)]
        assert sorted(map(str, again)) == sorted([str(weird), "planted"])  # the next lap
    finally:
        await client.drop_database(db.name)
        await client.close()
