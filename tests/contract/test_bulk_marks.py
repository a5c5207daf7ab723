"""Bulk done marks at their edges, on every backend (memory, mongomock, the wire): a flush or a
batch cancelled midway, one row that refuses its mark in a bulk write, and the read back after a
bulk write that moved fewer rows than it named (here and in the claims, on the Mongo adapters,
whose claim is a pick and a write with a window between them).

The rule each test pins: an effect that ran has its done mark written, unless the process dies
first; a row refusing its mark costs only itself; a row counts as moved, claimed or reclaimed by
us only if the store holds it in that state under our claim."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import pytest
from board_outbox_projections import BoardReflect

from board_outbox.model import transitions as tr
from board_outbox.model.board import EventSnapshot
from board_outbox.model.errors import StoreError
from board_outbox.model.rows import ErrorEntry
from board_outbox.ports import LaunchRequest
from tests.contract.test_completion import materialize, spy_marks
from tests.contract.test_projections import InOrder
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

T = "t1"
BOUND = 10.0  # seconds: each test's own bound, far inside the suite's per-test timeout


def launching(kit: Kit, seq: int, then: Any) -> None:
    """The launch of the row of event ``seq`` runs ``then()`` instead of reaching the runner."""
    inner = kit.launcher.launch

    async def launch(req: LaunchRequest) -> str:
        if req.seq == seq:
            return str(await then())
        return await inner(req)

    kit.launcher.launch = launch  # type: ignore[method-assign]


async def states(kit: Kit, tenant: str = T) -> dict[int, tuple[str, int]]:
    return {r.seq: (r.state, r.attempts) for r in await kit.rows(tenant)}


# --- cancellation and shutdown ------------------------------------------------------------------


async def test_a_timer_flush_cut_off_with_nothing_else_staged_keeps_its_marks(kit: Kit) -> None:
    """The flush timer takes row 1's mark; while its write is in flight, row 2's launch fails
    (a retry: nothing new is staged) and the batch ends, which stops the timer. The mark goes
    back on the stage though the stage is empty, and the closing flush writes it."""
    await materialize(kit, 2)
    worker = kit.worker(batch_size=10, mark_flush_seconds=0.01, heartbeat_fraction=0)
    writing = anyio.Event()

    async def slow_first_write(_marks: list[Any]) -> None:
        if not writing.is_set():
            writing.set()
            await anyio.sleep(BOUND)  # cut off by the end of the batch long before

    async def fail_once_the_flush_writes() -> str:
        await writing.wait()
        raise RuntimeError("bot runner down")

    spy = spy_marks(worker, slow_first_write)
    launching(kit, 2, fail_once_the_flush_writes)
    with anyio.fail_after(BOUND / 2):
        res = await worker.tick_any()
    assert (res.done, res.retried, res.unrecorded, res.lease_lost) == (1, 1, 0, 0)
    assert spy.calls == 2  # the timer's write (cut off) and the closing flush's
    assert await states(kit) == {1: ("done", 0), 2: ("pending", 1)}
    assert worker.inflight == {}


async def test_a_batch_cancelled_at_shutdown_writes_the_marks_of_the_effects_that_ran(
        kit: Kit) -> None:
    """Past the shutdown grace the batch is cancelled while row 2 launches: row 1's effect ran,
    so its mark goes out (the closing flush is shielded), and rows 2 and 3 are given back
    (the release is shielded too): pending, attempts unchanged, for another replica now."""
    await materialize(kit, 3)
    worker = kit.worker(batch_size=10, heartbeat_fraction=0, concurrency=1)
    second = anyio.Event()

    async def hang() -> str:
        second.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    launching(kit, 2, hang)
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.tick_any)
            await second.wait()
            tg.cancel_scope.cancel()
    assert await states(kit) == {1: ("done", 0), 2: ("pending", 0), 3: ("pending", 0)}
    assert [r.seq for r in kit.launcher.launches] == [1]
    assert worker.inflight == {}


class StuckTenant(BoardReflect):
    """t1's batched apply is refused, and its rows, each on its own, hang until cancelled."""

    name: ClassVar[str] = "stuck-tenant"
    started: ClassVar[anyio.Event]

    async def apply_many(self, tenant_id: str, events: Any) -> list[str]:
        if tenant_id == "t1":
            raise RuntimeError("t1 refused")
        return await super().apply_many(tenant_id, events)

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        if tenant_id == "t1":
            StuckTenant.started.set()
            await anyio.sleep_forever()
        return await super().apply(tenant_id, event)


async def test_a_cancelled_unit_gives_back_only_the_rows_whose_marks_are_not_staged(
        kit: Kit) -> None:
    """A projection unit across tenants: t0's rows are applied in bulk and their marks staged,
    then t1's rows run one by one and the batch is cancelled during the first. The unit never
    finished, but t0's rows ran: they end done, not given back (given back, the closing flush
    would be fenced out and they would run again); t1's rows are given back."""
    for t in ("t0", "t1"):
        await kit.card(t, "c1")
        for _ in range(2):
            await kit.emit(t, "card.updated", "c1")
    await kit.tail(seed="earliest", projections=("stuck-tenant",)).drain_all(["t0", "t1"])
    reg = kit.registry()
    reg.register_projection(StuckTenant(kit.readmodels))
    StuckTenant.started = anyio.Event()
    worker = kit.worker(registry=reg, batch_size=10, heartbeat_fraction=0)
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.tick_any)
            await StuckTenant.started.wait()
            tg.cancel_scope.cancel()
    assert await states(kit, "t0") == {1: ("done", 0), 2: ("done", 0)}
    assert await states(kit, "t1") == {1: ("pending", 0), 2: ("pending", 0)}
    assert worker.inflight == {}


# --- one row refusing its mark ------------------------------------------------------------------


async def test_a_bulk_write_refused_for_one_row_parks_that_row_alone(kit: Kit) -> None:
    """The store refuses the flush's bulk write because of row 2's document (any write naming
    it is refused): each mark is then written on its own; rows 1 and 3 are done, row 2 alone
    is parked as broken (R1) -- not every row of the batch, and none left to run again."""
    await materialize(kit, 3)
    worker = kit.worker(batch_size=10, heartbeat_fraction=0)
    claims = sorted(await worker.outbox.claim_any(kit.clock.now(), 30.0, 10, tenants=[T]),
                    key=lambda c: c.row.seq if c.row else 0)
    bad = claims[1].ref

    async def refuse(marks: list[Any]) -> None:
        if any(m.ref == bad for m in marks):
            raise StoreError("marks refused: Cannot apply to the document of seq 2")

    spy = spy_marks(worker, refuse)
    with anyio.fail_after(BOUND):
        res = await worker.run_claims(claims)
    assert (res.done, res.failed, res.unrecorded, res.lease_lost) == (2, 1, 0, 0)
    assert spy.calls == 4  # the bulk write, then each mark alone
    got = await states(kit)
    assert (got[1][0], got[2][0], got[3][0]) == ("done", "failed", "done")
    assert len(kit.launcher.launches) == 3  # and none runs again
    assert worker.inflight == {}


class RefusingT1:
    """The read-model store, refusing any write that names tenant t1's read model (as a store
    refuses a write on one malformed document); every call counted with its tenants."""

    def __init__(self, base: Any) -> None:
        self.base = base
        self.writes: list[tuple[str, str]] = []  # (method, the tenants it names)

    async def write_groups(self, groups: Any) -> list[list[bool]]:
        self.writes.append(("write_groups", ",".join(g.tenant_id for g in groups)))
        if any(g.tenant_id == "t1" for g in groups):
            raise StoreError("t1's read model refuses the write")
        return await self.base.write_groups(groups)  # type: ignore[no-any-return]

    async def write_many(self, model: str, tenant_id: str, ops: Any) -> list[bool]:
        self.writes.append(("write_many", tenant_id))
        if tenant_id == "t1":
            raise StoreError("t1's read model refuses the write")
        return await self.base.write_many(model, tenant_id, ops)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)


async def test_a_gathered_write_refused_for_one_tenant_fails_only_that_tenants_rows(
        kit: Kit) -> None:
    """One projection's rows of three tenants meet in one bulk read-model write, which the store
    refuses because of t1's group: each group is written on its own, so t0's and t2's writes
    stand (each written once, as a group) and only t1's rows run again on their own (and
    retry); t0's and t2's are not re-applied row by row."""
    import dataclasses

    from board_outbox.engine.work.gathered import GatheredReadModels
    from board_outbox.service.runtime import build_registry

    tenants = ["t0", "t1", "t2"]
    for t in tenants:
        await kit.card(t, "c1")
        for _ in range(2):
            await kit.emit(t, "card.updated", "c1")
    await kit.tail(seed="earliest", projections=("in-order",)).drain_all(tenants)
    store = RefusingT1(kit.readmodels)
    reg = build_registry(dataclasses.replace(kit.stores, readmodels=store), [])
    InOrder.seen = {}
    reg.register_projection(InOrder(GatheredReadModels(store)))
    worker = kit.worker(registry=reg, batch_size=10, heartbeat_fraction=0)
    with anyio.fail_after(BOUND):
        res = await worker.tick_any()
    assert (res.claimed, res.done, res.retried) == (6, 4, 2)
    assert store.writes[:4] == [("write_groups", "t0,t1,t2"), ("write_groups", "t0"),
                                ("write_groups", "t1"), ("write_groups", "t2")]
    assert [w for w in store.writes if w[0] == "write_many"] == [("write_many", "t1")] * 2
    for t in ("t0", "t2"):
        assert await states(kit, t) == {1: ("done", 0), 2: ("done", 0)}
    assert await states(kit, "t1") == {1: ("pending", 1), 2: ("pending", 1)}


# --- the read back after a short bulk write -----------------------------------------------------


async def test_a_short_bulk_write_counts_only_rows_in_the_marks_state_under_its_claim(
        kit: Kit) -> None:
    """Three rows of one claim; meanwhile the claim itself parked row 2 and gave row 3 back to
    retry (both keep its claim_id). A bulk done mark over the three moves only row 1, and says
    so: a row under our claim_id in another state is not ours to count. Written again (a retry
    after a lost answer), the mark finds row 1 done under its claim: moved."""
    await materialize(kit, 3)
    now = kit.clock.now()
    c1, c2, c3 = sorted(await kit.outbox.claim_any(now, 30.0, 10, tenants=[T]),
                        key=lambda c: c.row.seq if c.row else 0)
    err = ErrorEntry(attempt=1, at=now, error="boom")
    assert await kit.outbox.apply_claimed(c2.ref, c2.claim_id,
                                          tr.park(now=now, error=err, count_attempt=True))
    assert await kit.outbox.apply_claimed(c3.ref, c3.claim_id,
                                          tr.retry(now=now, error=err, not_before=now + 60))
    done = tr.done(now=now, outcome="launched")
    marks = [tr.Mark(c.ref, c.claim_id, done) for c in (c1, c2, c3)]
    assert await kit.outbox.apply_marks(marks) == [c1.ref]
    assert await kit.outbox.apply_marks(marks) == [c1.ref]
    assert await states(kit) == {1: ("done", 0), 2: ("failed", 1), 3: ("pending", 1)}


# --- the claim's own read back (the Mongo adapters: a pick, then a write) -----------------------


class Racing:
    """The outbox's collection, with another claimer taking one of the named rows just before
    each multi-row write (between the pick and the claim's write, where a real race falls)."""

    def __init__(self, coll: Any, lease_until: float) -> None:
        self._coll, self.lease_until = coll, lease_until
        self.stolen: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._coll, name)

    async def update_many(self, flt: dict[str, Any], update: dict[str, Any], **kw: Any) -> Any:
        ids = flt.get("_id", {}).get("$in") if isinstance(flt.get("_id"), dict) else None
        if ids and not self.stolen:
            self.stolen.append(ids[1])
            await self._coll.update_one(
                {"_id": ids[1]}, {"$set": {"state": "claimed", "claim_id": "thief",
                                           "lease_until": self.lease_until}})
        return await self._coll.update_many(flt, update, **kw)


def racing(kit: Kit, lease_until: float) -> Racing:
    outbox = kit.outbox._target  # type: ignore[attr-defined]  # the adapter under the proxy
    coll = outbox.coll = Racing(outbox.coll, lease_until)
    return coll


async def test_a_claim_that_loses_a_race_for_a_row_returns_only_the_rows_it_holds(
        mongo: Kit) -> None:
    """Another replica claims one of the picked rows between the pick and the claim's write:
    the claim returns the other rows only (that one is the thief's: run here too, it would run
    twice)."""
    kit = mongo
    await materialize(kit, 3)
    now = kit.clock.now()
    race = racing(kit, now + 30.0)
    claims = await kit.outbox.claim_any(now, 30.0, 10, tenants=[T])
    (stolen,) = race.stolen
    assert len(claims) == 2 and stolen not in {c.ref for c in claims}
    assert len({c.claim_id for c in claims}) == 1
    docs = {d["_id"]: d for d in [await kit.raw_row(c.row.row_key) for c in claims if c.row]
            if d is not None}
    assert all(d["claim_id"] == claims[0].claim_id for d in docs.values())


async def test_a_reclaim_that_loses_a_race_for_a_row_returns_only_the_rows_it_holds(
        mongo: Kit) -> None:
    """Three expired leases; another replica reclaims one of them between the sweep's find and
    its write: the sweep returns the two it holds, each with its attempt counted."""
    kit = mongo
    await materialize(kit, 3)
    now = kit.clock.now()
    first = await kit.outbox.claim_any(now, 5.0, 10, tenants=[T])
    assert len(first) == 3
    kit.clock.advance(6.0)
    now = kit.clock.now()
    race = racing(kit, now + 30.0)
    again = await kit.outbox.reclaim_expired(now, 30.0, 10, tenants=[T])
    (stolen,) = race.stolen
    assert len(again) == 2 and stolen not in {c.ref for c in again}
    assert all(c.reclaimed and c.row is not None and c.row.attempts == 1 for c in again)
    thief = [d for d in [await kit.raw_row(c.row.row_key) for c in first if c.row]
             if d is not None and d["_id"] == stolen]
    assert thief and thief[0]["claim_id"] == "thief"


async def test_a_row_refusing_its_reclaim_costs_only_itself(kit: Kit) -> None:
    """Two leases expire together; the second row's document refuses the reclaim (``$inc`` on
    a string ``attempts``). The broken row is parked (R1) and the other is reclaimed and run in
    the same tick, its lost attempt counted once -- not left claimed under a claim nobody holds
    until that lease runs out too (and counted again)."""
    await materialize(kit, 2)
    now = kit.clock.now()
    first = sorted(await kit.outbox.claim_any(now, 5.0, 10, tenants=[T]),
                   key=lambda c: c.row.seq if c.row else 0)
    good, bad = (c.row.row_key for c in first if c.row)
    doc = await kit.raw_row(bad)
    assert doc is not None and kit.delete_raw_row is not None
    await kit.delete_raw_row(bad)
    await kit.insert_raw_row({**doc, "attempts": "3"})  # the second of the sweep, broken
    kit.clock.advance(6.0)
    worker = kit.worker(batch_size=10, heartbeat_fraction=0)
    with anyio.fail_after(BOUND):
        res = await worker.tick_any()
    assert (res.failed, res.done) == (1, 1)
    got = {r.row_key: (r.state, r.attempts) for r in await kit.rows(T)}
    assert got[good] == ("done", 1)
    raw = await kit.raw_row(bad)
    assert raw is not None and raw["state"] == "failed"
    assert "row broke its claim" in raw["errors"][-1]["error"]
