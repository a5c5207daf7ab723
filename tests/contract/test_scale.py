"""Scale (S1-S3) on every backend: the worker's one claim across tenants, the expired-lease
sweep, batched marks and subscription reads, the O(1) poll net, and the membership store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from board_outbox.adapters.memory import MemoryMembershipStore
from board_outbox.engine.flow.membership import Ownership, owner
from board_outbox.engine.work.claiming import MIN_CLAIM
from board_outbox.model import transitions as tr
from board_outbox.model.board import EventSnapshot
from board_outbox.model.clock import ManualClock
from board_outbox.model.rows import new_projection_row
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import MembershipStore
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

SUB_A = Subscription(sub_id="sa", tenant_id="a", bot="bot",
                     rule=MatchRule(event_types=("card.created",)))
SUB_B = Subscription(sub_id="sb", tenant_id="b", bot="bot",
                     rule=MatchRule(event_types=("card.created",)))


async def two_tenants(kit: Kit, n: int = 2) -> None:
    for sub in (SUB_A, SUB_B):
        await kit.sub(sub)
        for i in range(n):
            await kit.card(sub.tenant_id, f"c{i}")
            await kit.emit(sub.tenant_id, "card.created", f"c{i}")
    await kit.tail(seed="earliest").drain_all(["a", "b"])


async def test_claim_any_takes_due_rows_of_every_tenant_once(kit: Kit) -> None:
    await two_tenants(kit)
    now = kit.clock.now()
    claims = await kit.outbox.claim_any(now, 30, 10)
    assert sorted(c.tenant_id for c in claims) == ["a", "a", "b", "b"]
    assert len({c.claim_id for c in claims}) == 1 and all(not c.reclaimed for c in claims)
    assert await kit.outbox.claim_any(now, 30, 10) == []  # claimed rows are not due
    assert await kit.outbox.reclaim_expired(now, 30, 10) == []  # leases still hold


async def test_claim_any_single_row(kit: Kit) -> None:
    await two_tenants(kit, n=1)
    (one,) = await kit.outbox.claim_any(kit.clock.now(), 30, 1)
    assert one.row is not None and one.row.state == "claimed"
    (other,) = await kit.outbox.claim_any(kit.clock.now(), 30, 1)
    assert other.ref != one.ref


async def test_claim_any_prefers_owned_tenants_and_steals_only_rows_that_waited(kit: Kit) -> None:
    await two_tenants(kit)
    now = kit.clock.now()
    mine = await kit.outbox.claim_any(now, 30, 10, prefer={"a"}, steal_before=now - 1)
    assert {c.tenant_id for c in mine} == {"a"}  # b's rows are fresh: b's owner takes them
    kit.clock.advance(2)
    now = kit.clock.now()
    stolen = await kit.outbox.claim_any(now, 30, 10, prefer={"a"}, steal_before=now - 1)
    assert {c.tenant_id for c in stolen} == {"b"} and len(stolen) == 2  # ... unless it did not


async def test_reclaim_expired_sweeps_every_tenant_and_counts_the_attempt(kit: Kit) -> None:
    await two_tenants(kit, n=1)
    first = await kit.outbox.claim_any(kit.clock.now(), 5, 10)
    kit.clock.advance(6)
    again = await kit.outbox.reclaim_expired(kit.clock.now(), 30, 10)
    assert sorted(c.tenant_id for c in again) == ["a", "b"]
    assert all(c.reclaimed and c.row is not None and c.row.attempts == 1 for c in again)
    assert {c.claim_id for c in again}.isdisjoint({c.claim_id for c in first})
    # the old holder's marks are fenced off; the new holder's grouped mark lands
    late, ok = tr.done(now=kit.clock.now(), outcome="x"), tr.done(now=kit.clock.now(), outcome="ok")
    for cid in {c.claim_id for c in first}:
        refs = [c.ref for c in first if c.claim_id == cid]
        assert await kit.outbox.apply_claimed_many(refs, cid, late) == []
    moved: list[Any] = []
    for cid in {c.claim_id for c in again}:
        moved += await kit.outbox.apply_claimed_many([c.ref for c in again if c.claim_id == cid], cid, ok)
    assert sorted(map(str, moved)) == sorted(str(c.ref) for c in again)
    assert {r.state for r in await kit.rows()} == {"done"}


async def test_a_grouped_mark_reports_each_row_it_moved(kit: Kit) -> None:
    await two_tenants(kit, n=1)
    claims = await kit.outbox.claim_any(kit.clock.now(), 30, 10)
    a, b = sorted(claims, key=lambda c: c.tenant_id)
    assert a.claim_id == b.claim_id  # one claim across tenants
    # b's claim is gone
    assert await kit.outbox.apply_claimed(b.ref, b.claim_id, tr.release(now=kit.clock.now()))
    done = tr.done(now=kit.clock.now(), outcome="ok")
    assert await kit.outbox.apply_claimed_many([a.ref, b.ref], a.claim_id, done) == [a.ref]
    states = {r.tenant_id: r.state for r in await kit.rows()}
    assert states == {"a": "done", "b": "pending"}


async def test_tick_any_runs_every_tenant_with_one_subscription_read_per_batch(kit: Kit) -> None:
    await two_tenants(kit, n=3)
    worker = kit.worker()
    res = await worker.tick_any()
    assert (res.claimed, res.done) == (6, 6)
    assert kit.faults.hits["subs.get_many"] == 1 and kit.faults.hits["subs.get"] == 0
    assert len(kit.launcher.launches) == 6
    assert (await worker.tick_any()).claimed == 0


async def test_the_rows_of_a_claim_are_marked_in_one_write(kit: Kit) -> None:
    """tick_any runs the claimed projection rows of one projection as one unit (P2): one
    apply_many; the done marks of the whole claim -- the projection rows and the launch rows,
    each launch with its own outcome -- go out in one fenced bulk write (issue 29)."""
    await kit.sub(SUB_A)
    await kit.card("a", "c0")
    for _ in range(3):
        await kit.emit("a", "card.created", "c0")
    await kit.tail(seed="earliest", projections=("board-reflect",)).drain_all(["a"])
    worker = kit.worker(registry=kit.registry(["board-reflect"]))
    res = await worker.tick_any()
    assert (res.claimed, res.done) == (6, 6)
    assert kit.faults.hits["outbox.apply_marks[done]"] == 1
    assert kit.faults.hits["outbox.apply_claimed[done]"] == 0
    assert kit.faults.hits["outbox.apply_claimed_many[done]"] == 0
    rows = await kit.rows()
    assert {r.state for r in rows} == {"done"}
    launched = [r.outcome for r in rows if r.kind == "launch"]
    assert len(launched) == 3 and len(set(launched)) == 3  # each launch's own outcome


async def test_claim_size_fits_the_lease_at_the_measured_pace(kit: Kit) -> None:
    await two_tenants(kit, n=5)
    worker = kit.worker(lease_seconds=10, batch_size=20)
    assert worker.claim_limit() == 20
    slow = kit.launcher

    def tick_clock(_req: Any) -> bool:
        kit.clock.advance(2.0)  # every launch takes 2 s
        return False

    slow.fail = tick_clock
    await worker.tick_any()
    assert worker.claim_limit() == 2  # 2 rows x 2 s fit within half the 10 s lease


async def test_claim_size_follows_the_backlog(kit: Kit) -> None:
    """Empty claims halve the claim size down to MIN_CLAIM; full ones double it back toward
    batch_size; the lease-based cap still applies on top."""
    worker = kit.worker(batch_size=16)
    assert worker.claim_limit() == 16
    sizes = []
    for _ in range(4):  # idle
        assert (await worker.tick_any()).claimed == 0
        sizes.append(worker.claim_limit())
    assert sizes == [8, 4, MIN_CLAIM, MIN_CLAIM]
    await two_tenants(kit, n=15)  # a backlog of 30 launch rows
    claimed = []
    for _ in range(4):
        claimed.append((await worker.tick_any()).claimed)
    assert claimed == [4, 8, 16, 2]  # full, full, full, then the rest
    assert worker.claim_limit() == 16  # a partial claim keeps the size
    assert (await worker.tick_any()).claimed == 0 and worker.claim_limit() == 8


async def test_poll_net_finds_only_tenants_behind_their_cursor(kit: Kit) -> None:
    await two_tenants(kit, n=1)
    tail = kit.tail(seed="earliest")
    assert await tail.behind() == []
    await kit.emit("b", "card.created", "c0")
    await kit.emit("nosubs", "card.created", "x")  # no subscription, no rows: not drained (M11)
    assert await tail.behind() == ["b"]
    await tail.drain_all(await tail.behind())
    assert await tail.behind() == []
    with_projections = kit.tail(seed="earliest", projections=("board-reflect",))
    assert await with_projections.behind() == ["nosubs"]  # a projection owes it rows


async def test_poll_net_keeps_tenants_with_live_rows(kit: Kit) -> None:
    ev = EventSnapshot(seq=1, type="card.created", card_id="c")
    await kit.outbox.upsert_rows([new_projection_row("orphan", ev, "board-reflect", 0.0)])
    await kit.emit("orphan", "card.created", "c")
    assert await kit.tail(seed="earliest").behind() == ["orphan"]


# --- membership -----------------------------------------------------------------------------


@pytest.fixture(params=["memory", "mongomock"])
async def members(request: pytest.FixtureRequest) -> AsyncIterator[MembershipStore]:
    if request.param == "memory":
        yield MemoryMembershipStore()
    else:
        from board_outbox.adapters.mongo import MongoMembershipStore, ensure_schema
        from tests.support.mongomock_async import mock_database

        db = mock_database()
        await ensure_schema(db)
        yield MongoMembershipStore(db)


async def test_members_expire_and_leave(members: MembershipStore) -> None:
    assert [m.member_id for m in await members.heartbeat("r1", 100.0, 5.0)] == ["r1"]
    assert [m.member_id for m in await members.heartbeat("r2", 101.0, 5.0)] == ["r1", "r2"]
    assert [m.member_id for m in await members.heartbeat("r2", 106.0, 5.0)] == ["r2"]  # r1 expired
    await members.heartbeat("r1", 106.5, 5.0)  # back
    await members.leave("r2")
    assert [m.member_id for m in await members.heartbeat("r1", 107.0, 5.0)] == ["r1"]


async def test_ownership_follows_the_live_members(members: MembershipStore) -> None:
    clock = ManualClock()
    views = [Ownership(members, clock, member_id=f"r{i}") for i in range(3)]
    for o in views:
        await o.beat()
    for o in views:
        await o.beat()  # the first ones to beat now see the later ones
    tenants = [f"t{i}" for i in range(300)]
    owned = [set(o.owned(tenants)) for o in views]
    assert sum(len(s) for s in owned) == 300 and set().union(*owned) == set(tenants)
    assert all(60 < len(s) < 140 for s in owned)  # spread evenly enough
    # r2 dies: after its lease, r0 and r1 split its tenants and keep their own
    lease = views[0].settings.lease_seconds
    for _ in range(2):
        clock.advance(lease * 0.6)
        await views[0].beat()
        await views[1].beat()
    await views[0].beat()
    assert views[0].members == views[1].members == ("r0", "r1")
    after = [set(views[i].owned(tenants)) for i in (0, 1)]
    assert after[0] | after[1] == set(tenants) and not after[0] & after[1]
    assert owned[0] <= after[0] and owned[1] <= after[1]  # rendezvous: only r2's tenants moved


def test_rendezvous_owner_is_one_of_the_members_and_stable() -> None:
    assert owner(["x", "y", "z"], "t") == owner(["z", "y", "x"], "t")
    assert owner(["x"], "t") == "x"


async def test_projection_units_never_mix_tenants(kit: Kit) -> None:
    """A claim across tenants (tick_any) applies each tenant's projection rows to that tenant's
    read model only."""
    for t in ("a", "b"):
        for i in range(3):
            await kit.card(t, f"{t}{i}")
            await kit.emit(t, "card.created", f"{t}{i}")
    await kit.tail(seed="earliest", projections=("board-reflect",)).drain_all(["a", "b"])
    worker = kit.worker(registry=kit.registry(["board-reflect"]))
    assert (await worker.tick_any()).done == 6
    for t in ("a", "b"):
        model = await kit.readmodels.list("board-reflect", t)
        assert sorted(d["card_id"] for d in model) == [f"{t}{i}" for i in range(3)]
