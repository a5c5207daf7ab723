"""Issue 21, on every backend (the memory twins, the Mongo adapters on mongomock and over the
wire): every lease, membership and gap comparison at the exact instant, the heartbeat cap just
inside and just past its window, claims under a limit smaller than the due rows (preference and
the steal cut-off driven through the worker's clock), rows with int, Int64 and float times, the
hooks counted, and a budget-spent reclaimed row inside a batched projection unit.

The documented side of every boundary (one rule, the same in both adapters):

- a row is due at ``now == not_before`` (``not_before <= now``);
- a lease has expired at ``now == lease_until`` (``lease_until <= now``): the reclaim takes it and
  the worker no longer starts it;
- a member's lease has expired at ``now == expires_at`` (live: ``expires_at > now``);
- a seq gap is dead (stepped over) once ``young_gap_seconds`` have passed since it was first
  seen (young: ``age < young_gap_seconds``);
- another tenant's row may be stolen once it has waited ``steal_after_seconds``
  (``not_before <= now - steal_after_seconds``);
- the heartbeat never extends a lease past ``started + max_execution_seconds``, and at that
  instant it stops.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
from bson.int64 import Int64

from board_outbox.adapters.memory import MemoryMembershipStore
from board_outbox.engine.handlers import LaunchHandler
from board_outbox.engine.handlers.registry import ExecutionContext, HandlerRegistry
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.engine.work.worker import Lease
from board_outbox.model.codec import to_doc
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import MembershipStore
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

LEASE = 10.0
KIND = "counted"


class Counted:
    """An effect kind that counts what the worker hands it: each ``prepare`` batch and each row."""

    def __init__(self) -> None:
        self.prepared: list[list[str]] = []
        self.ran: list[str] = []

    async def prepare(self, rows: Sequence[EffectRow]) -> int:
        self.prepared.append([r.row_key for r in rows])
        return len(rows)

    async def execute(self, row: EffectRow, ctx: ExecutionContext[Any]) -> str:
        self.ran.append(row.row_key)
        return "ok"


def raw_row(tenant: str, key: str, seq: int, *, not_before: Any, created_at: Any = None,
            state: str = "pending", lease_until: Any = None, claim_id: str | None = None) -> dict[str, Any]:
    """A row document as another writer may store it: the time fields exactly as given."""
    doc = to_doc(EffectRow(tenant_id=tenant, row_key=key, seq=seq, kind=KIND))
    doc.update(state=state, not_before=not_before, lease_until=lease_until, claim_id=claim_id,
               created_at=not_before if created_at is None else created_at,
               updated_at=not_before if created_at is None else created_at)
    return doc


def counted_worker(kit: Kit, **settings: Any) -> tuple[Any, Counted]:
    registry = HandlerRegistry()
    handler = Counted()
    registry.register(KIND, handler)
    return kit.worker(registry=registry, lease_seconds=LEASE, **settings), handler


# --- due and expired at the exact instant ----------------------------------------------------


async def test_a_row_is_due_at_exactly_its_not_before(kit: Kit) -> None:
    t0 = kit.clock.now()
    await kit.insert_raw_row(raw_row("a", "a/1", 1, not_before=t0 + 10))
    assert await kit.outbox.claim_any(t0 + 9.5, LEASE, 10) == []
    (c,) = await kit.outbox.claim_any(t0 + 10, LEASE, 10)  # now == not_before: due
    assert c.row is not None and c.row.row_key == "a/1" and not c.reclaimed


async def test_the_worker_claims_at_exactly_not_before(kit: Kit) -> None:
    t0 = kit.clock.now()
    await kit.insert_raw_row(raw_row("a", "a/1", 1, not_before=t0 + 10))
    worker, handler = counted_worker(kit)
    kit.clock.set(t0 + 9.5)
    assert (await worker.tick_any()).claimed == 0
    kit.clock.set(t0 + 10)
    assert (await worker.tick_any()).done == 1 and handler.ran == ["a/1"]


async def test_a_lease_has_expired_at_exactly_lease_until(kit: Kit) -> None:
    t0 = kit.clock.now()
    await kit.insert_raw_row(raw_row("a", "a/1", 1, not_before=t0))
    (mine,) = await kit.outbox.claim_any(t0, LEASE, 1)
    until = mine.lease_until
    assert until >= t0 + LEASE
    # just before: the lease holds, for the sweep and for a claim
    assert await kit.outbox.reclaim_expired(until - 0.25, LEASE, 10) == []
    assert await kit.outbox.claim_any(until - 0.25, LEASE, 10) == []
    # the worker that holds it no longer starts it at that instant (the same side)
    worker, handler = counted_worker(kit)
    kit.clock.set(until)
    res = await worker.run_claims([mine])
    assert res.skipped_expired == 1 and handler.ran == []
    (stolen,) = await kit.outbox.reclaim_expired(until, LEASE, 10)  # now == lease_until
    assert stolen.reclaimed and stolen.ref == mine.ref and stolen.claim_id != mine.claim_id
    assert stolen.row is not None and stolen.row.attempts == 1


async def test_the_worker_reclaims_at_exactly_lease_until(kit: Kit) -> None:
    t0 = kit.clock.now()
    await kit.insert_raw_row(raw_row("a", "a/1", 1, not_before=t0, state="claimed",
                                     lease_until=t0 + 20, claim_id="gone"))
    worker, handler = counted_worker(kit)
    kit.clock.set(t0 + 19.5)
    assert (await worker.tick_any()).claimed == 0
    kit.clock.set(t0 + 20)
    res = await worker.tick_any()
    assert res.claimed == 1 and res.done == 1 and handler.ran == ["a/1"]
    (row,) = await kit.rows("a")
    assert row.attempts == 1 and [e.kind for e in row.errors] == ["lease_expired"]


async def test_a_batched_unit_is_not_started_at_exactly_its_lease_until(kit: Kit) -> None:
    await _projection_rows(kit, 3)
    t0 = kit.clock.now()
    claims = await kit.outbox.claim_any(t0, LEASE, 10)
    assert len(claims) == 3 and len({c.lease_until for c in claims}) == 1
    worker = kit.worker(registry=kit.registry(["board-reflect"]))
    kit.clock.set(claims[0].lease_until)  # the lease has expired: whoever reclaims it runs it
    res = await worker.run_claims(claims)
    assert res.skipped_expired == 3 and res.done == 0
    assert await kit.readmodels.list("board-reflect", "t1") == []


async def test_a_lease_is_a_lease_up_to_exactly_the_sweep_horizon(kit: Kit) -> None:
    """The sweep parks a claimed row whose lease ends more than ``LEASE_HORIZON_SECONDS`` ahead
    (no worker would hold it that long); at exactly the horizon it is still a lease."""
    from board_outbox.model.row_documents import LEASE_HORIZON_SECONDS

    t0 = kit.clock.now()
    await kit.insert_raw_row(raw_row("a", "a/1", 1, not_before=t0, state="claimed",
                                     lease_until=t0 + LEASE_HORIZON_SECONDS, claim_id="x"))
    assert await kit.outbox.stuck_rows(t0, 10) == []
    assert len(await kit.outbox.stuck_rows(t0 - 0.5, 10)) == 1


# --- the young gap at the exact instant --------------------------------------------------------


async def test_a_gap_is_dead_at_exactly_young_gap_seconds(kit: Kit) -> None:
    sub = Subscription(sub_id="s", tenant_id="t1", bot="bot",
                       rule=MatchRule(event_types=("card.created", "card.updated")))
    await kit.sub(sub)
    await kit.card("t1", "c")
    await kit.emit("t1", "card.created", "c")  # 1
    await kit.events.allocate_seq("t1")  # 2: allocated, never inserted
    await kit.emit("t1", "card.updated", "c")  # 3
    tail = kit.tail(seed="earliest", young_gap_seconds=30)
    t0 = kit.clock.now()
    res = await tail.drain_tenant("t1")  # first seen now
    assert res.stopped == "young_gap" and res.cursor_after == 1
    kit.clock.set(t0 + 29.5)
    res = await tail.drain_tenant("t1")
    assert res.stopped == "young_gap" and res.cursor_after == 1  # still young
    kit.clock.set(t0 + 30)  # age == young_gap_seconds: a dead allocation
    res = await tail.drain_tenant("t1")
    assert res.cursor_after == 3 and res.stepped_gaps == 1


# --- the heartbeat cap, just inside and just past its window -----------------------------------


async def test_the_heartbeat_cap_holds_until_exactly_max_execution(kit: Kit) -> None:
    t0 = kit.clock.now()
    await kit.insert_raw_row(raw_row("a", "a/1", 1, not_before=t0))
    worker, _ = counted_worker(kit, max_execution_seconds=15, heartbeat_fraction=0.5)
    (mine,) = await kit.outbox.claim_any(t0, LEASE, 1)
    lease = Lease(mine, started=t0)
    kit.clock.set(t0 + 14.5)  # just inside the cap: extended, but only up to the cap
    assert await worker.extend(lease) and lease.stopped == ""
    assert lease.until == t0 + 15
    # a rival just before the cap cannot take the row
    assert await kit.outbox.reclaim_expired(t0 + 14.75, LEASE, 10) == []
    kit.clock.set(t0 + 15)  # at the cap: the heartbeat stops
    assert not await worker.extend(lease) and lease.stopped == "max_execution"
    # and a rival at the cap takes it, the attempt counted (M9)
    (stolen,) = await kit.outbox.reclaim_expired(t0 + 15, LEASE, 10)
    assert stolen.ref == mine.ref and stolen.row is not None and stolen.row.attempts == 1


# --- claims under a limit smaller than the due rows ---------------------------------------------


async def test_owned_rows_come_first_under_a_small_limit(kit: Kit) -> None:
    """b's rows are older and may already be stolen; a is ours: a limit of 2 takes a's rows."""
    t0 = kit.clock.now()
    for i in (1, 2):
        await kit.insert_raw_row(raw_row("b", f"b/{i}", i, not_before=t0))
    for i in (1, 2, 3):
        await kit.insert_raw_row(raw_row("a", f"a/{i}", i, not_before=t0 + 5))
    worker, handler = counted_worker(kit, batch_size=2, steal_after_seconds=1)
    worker.prefer = lambda: {"a"}
    kit.clock.set(t0 + 5)
    assert (await worker.tick_any()).done == 2
    assert sorted(handler.ran) == ["a/1", "a/2"]
    assert (await worker.tick_any()).done == 2
    assert handler.ran[2:] == ["a/3", "b/1"]  # ours first, then the oldest stolen one
    assert (await worker.tick_any()).done == 1 and handler.ran[4:] == ["b/2"]


async def test_owned_rows_are_found_behind_more_than_a_window_of_fresh_foreign_rows(
    kit: Kit, request: pytest.FixtureRequest
) -> None:
    """Five of b's rows, due but not yet stealable, are older than a's: a limit of 2 must still
    take a's rows (the Mongo adapter once looked only at the ``2 * limit`` oldest due rows before
    it applied the preference, and claimed nothing here)."""
    t0 = kit.clock.now()
    for i in range(5):
        await kit.insert_raw_row(raw_row("b", f"b/{i}", i + 1, not_before=t0 - 0.5))
    for i in range(3):
        await kit.insert_raw_row(raw_row("a", f"a/{i}", i + 1, not_before=t0))
    got = await kit.outbox.claim_any(t0, LEASE, 2, prefer={"a"}, steal_before=t0 - 1)
    assert sorted(c.tenant_id for c in got) == ["a", "a"]


async def test_the_steal_cut_off_runs_on_the_workers_clock_from_materialization(kit: Kit) -> None:
    """Another tenant's row is stolen once ``steal_after_seconds`` have passed since it was
    materialized (its created_at, not its due time: a row due long ago but written just now is
    its owner's to claim first, issue 23), at exactly that instant."""
    t0 = kit.clock.now()
    await kit.insert_raw_row(raw_row("b", "b/1", 1, not_before=t0 - 100, created_at=t0))
    worker, handler = counted_worker(kit, batch_size=1, steal_after_seconds=1)
    worker.prefer = lambda: {"a"}
    kit.clock.set(t0)
    assert (await worker.tick_any()).claimed == 0
    kit.clock.set(t0 + 0.5)
    assert (await worker.tick_any()).claimed == 0
    kit.clock.set(t0 + 1)  # waited exactly steal_after_seconds
    assert (await worker.tick_any()).done == 1 and handler.ran == ["b/1"]


async def test_without_a_preference_the_limit_takes_the_oldest(kit: Kit) -> None:
    t0 = kit.clock.now()
    for i, tenant in enumerate(("b", "a", "c"), start=1):
        await kit.insert_raw_row(raw_row(tenant, f"{tenant}/{i}", i, not_before=t0 + i))
    worker, handler = counted_worker(kit, batch_size=2)
    kit.clock.set(t0 + 3)
    assert (await worker.tick_any()).done == 2
    assert sorted(handler.ran) == ["a/2", "b/1"]


# --- rows with int, Int64 and float times -------------------------------------------------------


TIMES: list[tuple[str, Callable[[float], Any]]] = [
    ("int", lambda t: int(t)), ("Int64", lambda t: Int64(int(t))), ("float", float)]


@pytest.mark.parametrize("conv", [c for _, c in TIMES], ids=[n for n, _ in TIMES])
async def test_rows_with_integer_and_float_times_are_claimed_and_run(
    kit: Kit, conv: Callable[[float], Any]
) -> None:
    t0 = kit.clock.now()
    await kit.insert_raw_row(raw_row("a", "a/1", 1, not_before=conv(t0)))
    await kit.insert_raw_row(raw_row("a", "a/2", 2, not_before=conv(t0 - 30), state="claimed",
                                     lease_until=conv(t0 - 5), claim_id="gone"))
    await kit.insert_raw_row(raw_row("a", "a/3", 3, not_before=conv(t0 + 60)))
    assert await kit.outbox.stuck_rows(t0, 10) == []  # none of them is unclaimable
    worker, handler = counted_worker(kit)
    kit.clock.set(t0)
    res = await worker.tick_any()  # sweep, reclaim, claim, run
    assert res.failed == 0 and res.done == 2 and sorted(handler.ran) == ["a/1", "a/2"]
    kit.clock.set(t0 + 60)  # exactly its not_before, as stored
    assert (await worker.tick_any()).done == 1 and handler.ran[-1] == "a/3"
    assert {r.row_key: r.state for r in await kit.rows("a")} == {
        "a/1": "done", "a/2": "done", "a/3": "done"}


# --- hooks, counted ----------------------------------------------------------------------------


class CountingMetrics(Metrics):
    def __init__(self) -> None:
        super().__init__()
        self.done: list[str] = []
        self.failed: list[str] = []

    def row_done(self, row: EffectRow, now: float) -> None:
        self.done.append(row.row_key)
        super().row_done(row, now)

    def row_failed(self, kind: str) -> None:
        self.failed.append(kind)
        super().row_failed(kind)


class CountingLaunch:
    """The real launch handler, with its batch read counted."""

    def __init__(self, inner: LaunchHandler) -> None:
        self.inner = inner
        self.prepared: list[int] = []

    async def prepare(self, rows: Sequence[EffectRow]) -> dict[str, Subscription]:
        self.prepared.append(len(rows))
        return await self.inner.prepare(rows)

    async def execute(self, row: EffectRow, ctx: ExecutionContext[dict[str, Subscription]]) -> str:
        return await self.inner.execute(row, ctx)


async def test_every_hook_runs_once_per_row_on_the_single_row_path(kit: Kit) -> None:
    sub = Subscription(sub_id="s", tenant_id="t1", bot="bot",
                       rule=MatchRule(event_types=("card.created",)))
    await kit.sub(sub)
    for i in range(3):
        await kit.card("t1", f"c{i}")
        await kit.emit("t1", "card.created", f"c{i}")
    await kit.tail(seed="earliest").drain_all(["t1"])
    registry = kit.registry()
    launch = registry.handler("launch")
    assert isinstance(launch, LaunchHandler)
    counting = CountingLaunch(launch)
    registry.register("launch", counting, replace=True)
    worker = kit.worker(registry=registry)
    seen: list[tuple[str, str]] = []
    worker.on_done = lambda row, outcome: seen.append((row.row_key, outcome))
    worker.metrics = metrics = CountingMetrics()
    res = await worker.tick_any()
    assert res.done == 3
    assert counting.prepared == [3]  # one batch read for the claim
    stored = {r.row_key: r.outcome for r in await kit.rows("t1")}
    assert len(seen) == 3 and dict(seen) == stored  # each row once, with its recorded outcome
    assert sorted(metrics.done) == sorted(stored) and metrics.failed == []
    assert len(kit.launcher.launches) == 3


async def _projection_rows(kit: Kit, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        await kit.card("t1", f"c{i}")
        await kit.emit("t1", "card.created", f"c{i}")
    await kit.tail(seed="earliest", projections=("board-reflect",)).drain_all(["t1"])


async def test_every_hook_runs_once_per_row_on_the_batched_path(kit: Kit) -> None:
    await _projection_rows(kit, 3)
    worker = kit.worker(registry=kit.registry(["board-reflect"]))
    seen: list[tuple[str, str]] = []
    worker.on_done = lambda row, outcome: seen.append((row.row_key, outcome))
    worker.metrics = metrics = CountingMetrics()
    res = await worker.tick_any()
    assert res.done == 3
    stored = {r.row_key: r.outcome for r in await kit.rows("t1")}
    assert len(seen) == 3 and dict(seen) == stored
    assert sorted(metrics.done) == sorted(stored)
    assert metrics.applied == {("t1", "board-reflect"): 3}


# --- the attempt budget inside a batched projection unit ----------------------------------------


async def test_a_budget_spent_reclaimed_row_parks_inside_a_batched_unit(kit: Kit) -> None:
    await _projection_rows(kit, 1)
    t0 = kit.clock.now()
    (hung,) = await kit.outbox.claim_any(t0, LEASE, 1)  # its effect hangs; the lease runs out
    await _projection_rows(kit, 2, start=1)
    kit.clock.set(hung.lease_until + 1)
    worker = kit.worker(registry=kit.registry(["board-reflect"]), max_attempts=1,
                        lease_seconds=LEASE)
    worker.metrics = metrics = CountingMetrics()
    res = await worker.tick_any()  # the spent row, reclaimed, plus two fresh ones: one claim
    assert res.claimed == 3 and res.done == 2 and res.failed == 1
    rows = {r.row_key: r for r in await kit.rows("t1")}
    parked = [r for r in rows.values() if r.state == "failed"]
    assert len(parked) == 1 and parked[0].seq == hung.row.seq  # type: ignore[union-attr]
    assert "attempt budget spent" in parked[0].errors[-1].error
    assert metrics.failed == ["projection"]
    model = await kit.readmodels.list("board-reflect", "t1")
    assert sorted(d["card_id"] for d in model) == ["c1", "c2"]  # the spent row never applied


# --- membership at the exact instant ------------------------------------------------------------


@pytest.fixture(params=["memory", "mongomock", pytest.param("mongo-live", marks=pytest.mark.live_mongo)])
async def members(request: pytest.FixtureRequest) -> AsyncIterator[MembershipStore]:
    from board_outbox.adapters.mongo import MongoMembershipStore, ensure_schema

    if request.param == "memory":
        yield MemoryMembershipStore()
    elif request.param == "mongomock":
        from tests.support.mongomock_async import mock_database

        db = mock_database()
        await ensure_schema(db)
        yield MongoMembershipStore(db)
    else:
        from tests.conftest import live_database

        async with live_database(request.getfixturevalue("live_uri")) as live_db:
            yield MongoMembershipStore(live_db)


async def test_a_member_has_expired_at_exactly_expires_at(members: MembershipStore) -> None:
    got = await members.heartbeat("r1", 100.0, 5.0)  # expires at 105
    assert [(m.member_id, m.expires_at) for m in got] == [("r1", 105.0)]
    assert [m.member_id for m in await members.live(104.75)] == ["r1"]
    assert await members.live(105.0) == []  # now == expires_at: gone
    # a heartbeat at that instant sees itself only
    assert [m.member_id for m in await members.heartbeat("r2", 105.0, 5.0)] == ["r2"]
    assert [m.member_id for m in await members.heartbeat("r1", 109.75, 5.0)] == ["r1", "r2"]
    assert [m.member_id for m in await members.heartbeat("r1", 110.0, 5.0)] == ["r1"]
