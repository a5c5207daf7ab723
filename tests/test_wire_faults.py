"""Wire-level faults (SPEC W2), injected by the server itself through ``failCommand``.

Every fault is aimed at one command the tail, the worker or the waker sends, and each test
asserts two things: the classification (``StoreUnavailable`` for every transient fault,
``StoreError`` for a real error) and the ADR behaviour (the batch aborts with the cursor
untouched, marks are retried or fenced, the stream resumes, and nothing is lost).

The failpoints are scoped by ``appName`` to the client under test, so the checking client is
never hit. pymongo retries a retryable read or write once by itself, so a fault that must reach
our code is armed until the test disarms it (with ``timeoutMS`` set, pymongo retries a
retryable command for as long as the op timeout allows).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient, MongoClient, monitoring

from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.adapters.mongo import ensure_schema, mongo_stores
from board_outbox.model import transitions as tr
from board_outbox.model.board import Card
from board_outbox.model.errors import StoreError, StoreUnavailable
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from tests.support.kits import Kit, claim, mongo_kit
from tests.support.live_mongo import LiveServer

pytestmark = [pytest.mark.anyio, pytest.mark.live_mongo]

APP = "bo-under-fault"
OP_TIMEOUT_MS = 1500

# name -> failCommand data. Each one is a fault a real replica set produces.
TRANSIENT: dict[str, dict[str, Any]] = {
    "closeConnection": {"closeConnection": True},
    "NotWritablePrimary-10107": {"errorCode": 10107},
    "PrimarySteppedDown-189": {"errorCode": 189},
    "ShutdownInProgress-91": {"errorCode": 91},
    "InterruptedAtShutdown-11600": {"errorCode": 11600},
    "MaxTimeMSExpired-50": {"errorCode": 50},
    "blockConnection-past-timeout": {"blockConnection": True, "blockTimeMS": OP_TIMEOUT_MS + 1500},
}
WRITE_CONCERN = {"writeConcernError": {"code": 64, "codeName": "WriteConcernFailed",
                                       "errmsg": "waiting for replication timed out",
                                       "errInfo": {"wtimeout": True}}}
PERMANENT = {"errorCode": 2}  # BadValue: a real error, never retried as if transient


class FailPoints:
    def __init__(self, uri: str) -> None:
        self.admin: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=5000)

    @contextmanager
    def arm(self, commands: list[str], data: dict[str, Any],
            mode: Any = "alwaysOn") -> Iterator[None]:
        self.admin.admin.command("configureFailPoint", "failCommand", mode=mode,
                                 data={"failCommands": commands, "appName": APP, **data})
        try:
            yield
        finally:
            self.admin.admin.command("configureFailPoint", "failCommand", mode="off")


@pytest.fixture(scope="module")
def failpoints(live: LiveServer) -> Iterator[FailPoints]:
    if not live.failpoints():
        pytest.skip("this server has no test commands (mongod: --setParameter enableTestCommands=1)")
    fp = FailPoints(live.uri)
    yield fp
    fp.admin.close()


class FailedCommands(monitoring.CommandListener):
    """Counts the commands that failed on the client under test (the driver's own retries and
    change-stream resumes included), so a test can tell that its fault really fired."""

    def __init__(self) -> None:
        self.failed_by_name: dict[str, int] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self.failed_by_name[event.command_name] = self.failed_by_name.get(event.command_name, 0) + 1


class Wire:
    """The adapters over a client named APP (the one the failpoints hit), plus a clean client
    for checking what really reached the store."""

    def __init__(self, uri: str) -> None:
        self.name = f"bo_fault_{uuid.uuid4().hex[:8]}"
        self.failures = FailedCommands()
        self.client: Any = AsyncMongoClient(
            uri, appname=APP, tz_aware=True, timeoutMS=OP_TIMEOUT_MS, retryWrites=True,
            retryReads=True, serverSelectionTimeoutMS=5000, event_listeners=[self.failures],
            # after a not-primary error the driver re-discovers the primary; its monitor then
            # waits up to one heartbeat (10 s by default) -- keep the suite quick
            heartbeatFrequencyMS=500)
        self.clean: Any = AsyncMongoClient(uri, tz_aware=True)
        self.db = self.client[self.name]
        self.check = self.clean[self.name]
        self.kit: Kit = mongo_kit(self.db, "wire")

    async def cursor(self, tenant: str) -> int | None:
        doc = await self.check["trigger_cursors"].find_one({"_id": tenant})
        return None if doc is None else int(doc["seq"])

    async def row_keys(self) -> list[str]:
        return sorted([d["row_key"] async for d in self.check["trigger_effects"].find({})])

    async def close(self) -> None:
        await self.clean.drop_database(self.name)
        await self.client.close()
        await self.clean.close()


@pytest.fixture
async def wire(live: LiveServer, failpoints: FailPoints) -> AsyncIterator[Wire]:
    w = Wire(live.uri)
    await ensure_schema(w.check)
    try:
        yield w
    finally:
        await w.close()


T = "t1"


async def after_outage(fn: Any, *args: Any) -> Any:
    """Call ``fn`` as the next ticks would, until the store answers again: after a not-primary
    error the driver re-discovers the primary before it selects it again."""
    for _ in range(40):
        try:
            res = await fn(*args)
        except StoreUnavailable:
            await anyio.sleep(0.25)
            continue
        if getattr(res, "stopped", None) != "aborted":
            return res
        await anyio.sleep(0.25)
    raise AssertionError("the store never came back")


async def board(kit: Kit, events: int = 3) -> None:
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="b"))
    for i in range(events):
        await kit.card(T, f"c{i}")
        await kit.emit(T, "card.created", f"c{i}")


# --- classification: every transient fault on every command is StoreUnavailable ---------------


async def _call(w: Wire, command: str) -> None:
    """One adapter call that sends ``command`` first."""
    k = w.kit
    if command == "find":
        await k.events.read_after(T, 0, 10)
    elif command == "update":
        await k.cursors.compare_and_set(T, 0, 1)
    elif command == "findAndModify":
        await w.check["trigger_effects"].insert_one(
            {"tenant_id": T, "row_key": f"{T}/1/x", "seq": 1, "state": "pending", "not_before": 0.0})
        await k.outbox.claim_any(k.clock.now(), 30, 1)  # one due row: claimed by findAndModify
    elif command == "aggregate":
        await k.outbox.count_by_state(T)
    elif command == "distinct":
        await k.outbox.live_tenants()
    elif command == "getMore":  # a read longer than the first batch (101 documents)
        # (the event and card reads ask for their whole batch in one reply since issue 22: a
        # tenant's subscriptions are still read in batches of the server's default size)
        await w.check["trigger_subscriptions"].insert_many(
            [{"_id": f"s{i}", "sub_id": f"s{i}", "tenant_id": T, "bot": "b"} for i in range(150)])
        await k.subs.list_for_tenant(T)
    else:  # pragma: no cover
        raise AssertionError(command)


@pytest.mark.parametrize("command", ["find", "update", "findAndModify", "aggregate", "distinct"])
@pytest.mark.parametrize("fault", sorted(TRANSIENT))
async def test_transient_fault_is_store_unavailable(
        wire: Wire, failpoints: FailPoints, command: str, fault: str) -> None:
    with failpoints.arm([command], TRANSIENT[fault]), pytest.raises(StoreUnavailable):
        await _call(wire, command)


@pytest.mark.parametrize("code", [43, 237])  # CursorNotFound, CursorKilled: a restart mid-read
async def test_a_cursor_lost_mid_read_is_transient(
        wire: Wire, failpoints: FailPoints, code: int) -> None:
    with failpoints.arm(["getMore"], {"errorCode": code}), pytest.raises(StoreUnavailable):
        await _call(wire, "getMore")


async def test_an_event_batch_and_its_cards_are_read_in_one_reply_each(
        wire: Wire, failpoints: FailPoints) -> None:
    """Issue 22: the tail's reads ask for the whole batch at once, so a batch longer than the
    server's default first batch (101 documents) costs no getMore round trip: with every
    getMore failing, both reads still succeed."""
    w, k = wire, wire.kit
    await w.check["board_events"].insert_many(
        [{"tenant_id": T, "seq": i, "type": "x", "card_id": f"c{i}"} for i in range(1, 151)])
    await w.check["board_cards"].insert_many(
        [{"_id": f"{T}/c{i}", "tenant_id": T, "card_id": f"c{i}"} for i in range(1, 151)])
    with failpoints.arm(["getMore"], {"errorCode": 43}):
        assert len(await k.events.read_after(T, 0, 500)) == 150
        assert len(await k.cards.get_many(T, {f"c{i}" for i in range(1, 151)})) == 150


async def test_permanent_error_is_store_error_not_unavailable(
        wire: Wire, failpoints: FailPoints) -> None:
    with failpoints.arm(["find"], PERMANENT), pytest.raises(StoreError) as info:
        await _call(wire, "find")
    assert not isinstance(info.value, StoreUnavailable)


async def test_write_concern_error_on_the_bulk_upsert_is_transient_and_aborts(
        wire: Wire, failpoints: FailPoints) -> None:
    k = wire.kit
    await board(k)
    rows = [EffectRow(tenant_id=T, seq=1, row_key=f"{T}/1/x", sub_id="x")]
    # the rows are written by one unordered insert (a duplicate row key: the row exists)
    with failpoints.arm(["insert"], WRITE_CONCERN), pytest.raises(StoreUnavailable):
        await k.outbox.upsert_rows(rows)  # a wtimeout: the write may or may not be durable
    unsatisfiable = {"writeConcernError": {"code": 100, "codeName": "UnsatisfiableWriteConcern",
                                           "errmsg": "not enough data-bearing nodes"}}
    with failpoints.arm(["insert"], unsatisfiable), pytest.raises(StoreError) as info:
        await k.outbox.upsert_rows(rows)  # a deployment that can never satisfy the concern
    assert not isinstance(info.value, StoreUnavailable)
    await wire.check["trigger_effects"].delete_many({})
    tail = k.tail(seed="earliest")
    with failpoints.arm(["insert"], WRITE_CONCERN):
        res = await tail.drain_tenant(T)
    assert res.stopped == "aborted"
    assert await wire.cursor(T) == 0  # the CAS never ran: the insert's outcome was unknown
    assert (await after_outage(tail.drain_tenant, T)).cursor_after == 3
    assert len(await wire.row_keys()) == 3


# --- the tail: the batch aborts with the cursor untouched, then loses nothing ------------------

TAIL_POINTS = {
    # (command, mode): which of the batch's commands the fault hits
    "event read (find)": (["find"], {"skip": 1, "times": 10_000}),  # skip the cursor read
    "bulk insert (insert)": (["insert"], "alwaysOn"),
    "cursor CAS (update)": (["update"], "alwaysOn"),
}


@pytest.mark.parametrize("point", sorted(TAIL_POINTS))
@pytest.mark.parametrize("fault", ["closeConnection", "NotWritablePrimary-10107",
                                   "InterruptedAtShutdown-11600", "blockConnection-past-timeout"])
async def test_tail_aborts_with_cursor_untouched_then_loses_nothing(
        wire: Wire, failpoints: FailPoints, point: str, fault: str) -> None:
    k = wire.kit
    await board(k)
    tail = k.tail(seed="earliest")
    await tail.cursor(T)  # seeded before the fault, so the modes count the batch's commands
    commands, mode = TAIL_POINTS[point]
    with failpoints.arm(commands, TRANSIENT[fault], mode=mode):
        res = await tail.drain_tenant(T)
    assert res.stopped == "aborted", res
    assert await wire.cursor(T) == 0
    res = await after_outage(tail.drain_tenant, T)
    assert (res.stopped, res.cursor_after) == ("", 3)
    assert len(await wire.row_keys()) == 3  # once each, whether or not the upsert had landed


# --- the worker: claims, marks and reclaims under faults ------------------------------------


async def _materialize(k: Kit, events: int) -> None:
    tail = k.tail(seed="earliest")
    assert (await tail.drain_tenant(T)).cursor_after == events


@pytest.mark.parametrize("fault", ["closeConnection", "NotWritablePrimary-10107",
                                   "ShutdownInProgress-91", "blockConnection-past-timeout"])
async def test_claim_fault_loses_nothing(wire: Wire, failpoints: FailPoints, fault: str) -> None:
    k = wire.kit
    await board(k)
    await _materialize(k, 3)
    worker = k.worker(lease_seconds=30)
    with failpoints.arm(["update"], TRANSIENT[fault]), pytest.raises(StoreUnavailable):
        await worker.tick_any()
    k.clock.advance(31)  # whatever the failed claim may have taken is reclaimable now
    for _ in range(3):
        await after_outage(worker.tick_any)
    rows = await k.rows(T)
    assert [r.state for r in rows] == ["done"] * 3
    assert sorted(r.row_key for r in k.launcher.launches) == sorted(r.row_key for r in rows)


@pytest.mark.parametrize("fault", ["closeConnection", "NotWritablePrimary-10107",
                                   "PrimarySteppedDown-189", "MaxTimeMSExpired-50"])
async def test_mark_done_fault_is_retried_and_launches_once(
        wire: Wire, failpoints: FailPoints, fault: str) -> None:
    k = wire.kit
    await board(k, events=1)
    await _materialize(k, 1)
    worker = k.worker(lease_seconds=30)
    # claim = find + update + find; the launch touches no store; then mark_done = update,
    # which fails until the outage ends 2 s later: the worker rides it out within the lease
    with failpoints.arm(["update"], TRANSIENT[fault], mode={"skip": 1, "times": 10_000}):
        async with anyio.create_task_group() as tg:
            async def outage_ends() -> None:
                await anyio.sleep(2.0)
                failpoints.admin.admin.command("configureFailPoint", "failCommand", mode="off")

            tg.start_soon(outage_ends)
            res = await worker.tick_any()
    assert res.done == 1
    rows = await k.rows(T)
    assert [r.state for r in rows] == ["done"] and len(k.launcher.launches) == 1


@pytest.mark.parametrize("fault", ["closeConnection", "NotWritablePrimary-10107",
                                   "InterruptedAtShutdown-11600"])
async def test_reclaim_fault_then_reclaim_counts_the_attempt_once(
        wire: Wire, failpoints: FailPoints, fault: str) -> None:
    k = wire.kit
    await board(k, events=1)
    await _materialize(k, 1)
    claims = await claim(k.outbox, T, k.clock.now(), 5, 10)  # a worker that died
    assert len(claims) == 1
    k.clock.advance(6)
    worker = k.worker(lease_seconds=30)
    # the reclaim: find the expired leases, one update_many takes them back
    with failpoints.arm(["update"], TRANSIENT[fault]), pytest.raises(StoreUnavailable):
        await worker.tick_any()
    await after_outage(worker.tick_any)
    (row,) = await k.rows(T)
    assert row.state == "done" and row.attempts == 1 and len(k.launcher.launches) == 1


async def test_fenced_mark_after_steal_is_a_no_op_on_the_wire(wire: Wire) -> None:
    k = wire.kit
    await board(k, events=1)
    await _materialize(k, 1)
    (stale,) = await claim(k.outbox, T, k.clock.now(), 5, 10)
    k.clock.advance(6)
    (fresh,) = await claim(k.outbox, T, k.clock.now(), 30, 10)
    assert fresh.claim_id != stale.claim_id
    assert not await k.outbox.apply_claimed(
        stale.ref, stale.claim_id, tr.done(now=k.clock.now(), outcome="late"))
    assert await k.outbox.apply_claimed(fresh.ref, fresh.claim_id, tr.done(now=k.clock.now(), outcome="ok"))
    (row,) = await k.rows(T)
    assert row.outcome == "ok"


# --- the waker: the stream resumes after faults on aggregate and getMore ------------------------


@pytest.mark.parametrize(("command", "fault"), [
    ("getMore", "closeConnection"), ("getMore", "NotWritablePrimary-10107"),
    ("getMore", "InterruptedAtShutdown-11600"), ("aggregate", "closeConnection"),
    ("aggregate", "PrimarySteppedDown-189"), ("getMore", "blockConnection-past-timeout"),
])
async def test_service_rides_out_stream_faults_and_loses_nothing(
        wire: Wire, failpoints: FailPoints, command: str, fault: str) -> None:
    launcher = MemoryLauncher()
    stores = mongo_stores(wire.db, launcher)
    await stores.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    for i in range(6):
        await stores.cards.put(Card(tenant_id=T, card_id=f"c{i}"))
    # the poll net is far away: only the stream (or its fallback) can deliver in time
    cfg = load_config(env={}, tail={"poll_interval_seconds": 60, "seed": "earliest"},
                      worker={"idle_seconds": 0.05})
    service = Service(stores, cfg, rng=random.Random(1))
    clean_events = wire.check["board_events"]

    async def emit(i: int) -> None:
        await clean_events.insert_one({"tenant_id": T, "seq": i, "type": "card.created",
                                       "card_id": f"c{i - 1}", "at": 0.0})

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            await anyio.sleep(1.5)  # the stream is open: event 1 comes through it
            await emit(1)
            while len(launcher.launches) < 1:
                await anyio.sleep(0.05)
            assert service.stats.stream_wakes == 1
            # an aggregate runs only when the stream (re)opens: break it with the same fault
            commands = [command] if command == "getMore" else [command, "getMore"]
            with failpoints.arm(commands, TRANSIENT[fault]):
                for i in range(2, 5):
                    await emit(i)
                await anyio.sleep(1.0)
            for i in range(5, 7):
                await emit(i)
            while len(launcher.launches) < 6:
                await anyio.sleep(0.05)
            service.stop()
    assert sorted(r.seq for r in launcher.launches) == [1, 2, 3, 4, 5, 6]
    # the fault fired (the driver may have resumed by itself, or handed it to our waker) ...
    assert sum(wire.failures.failed_by_name.get(c, 0) for c in commands) >= 1
    # ... and the stream resumed from its token: every event came through it, none missed
    assert service.stats.stream_wakes == 6
