"""Projections on every backend (memory, mongomock, the wire): the read-model store's batch
writes, the built-in projections ``board-reflect`` and ``card-activity`` (the shipped contract
checks of ``board_outbox.testing``, on each backend's store), and the worker's batched apply (P2)."""

from __future__ import annotations

import random
from typing import Any, ClassVar

import pytest
from board_outbox_projections import BoardReflect, CardActivity

from board_outbox.engine.work.batch import plan
from board_outbox.model import transitions as tr
from board_outbox.model.board import EventSnapshot
from board_outbox.ports import PushRecent, ReadModelWrites, UpsertIfNewer
from board_outbox.testing import ProjectionContract, check_projection
from tests.support.kits import Kit, claim

pytestmark = pytest.mark.anyio

T = "t1"


def ev(seq: int, card: str = "c1", actor: str | None = None, etype: str = "card.updated") -> EventSnapshot:
    return EventSnapshot(seq=seq, type=etype, card_id=card, at=100.0 + seq, actor=actor or f"u{seq}",
                         column=f"col{seq % 2}", title=f"t{seq}")


async def test_write_many_upsert_if_newer_and_push_recent(kit: Kit) -> None:
    rm = kit.readmodels
    assert await rm.write_many("m", T, [
        UpsertIfNewer(key="a", seq=5, doc={"v": 5}),
        UpsertIfNewer(key="a", seq=3, doc={"v": 3}),  # same new key, older: stale whatever the order
        PushRecent(key="b", seq=2, entry={"x": 2}, keep=2),
        PushRecent(key="b", seq=4, entry={"x": 4}, keep=2),
    ]) == [True, False, True, True]
    assert (await rm.get("m", T, "a") or {})["v"] == 5
    # repeated and older entries change nothing; a newer one pushes the oldest out
    assert await rm.write_many("m", T, [
        PushRecent(key="b", seq=4, entry={"x": 4}, keep=2),
        PushRecent(key="b", seq=9, entry={"x": 9}, keep=2),
        UpsertIfNewer(key="a", seq=5, doc={"v": 55}),
    ]) == [False, True, False]
    b = await rm.get("m", T, "b") or {}
    assert [(e["seq"], e["x"]) for e in b["recent"]] == [(9, 9), (4, 4)] and b["last_seq"] == 9
    assert await rm.write_many("m", T, []) == []


async def test_card_activity_keeps_the_last_n_with_who_and_when(kit: Kit) -> None:
    await kit.card(T, "c1", column="inbox")
    for actor in ("ann", "bob", "cy"):
        seq = await kit.events.allocate_seq(T)
        await kit.events.insert({"tenant_id": T, "seq": seq, "type": "card.updated", "card_id": "c1",
                                 "at": kit.clock.now() + seq, "actor": actor})
    await kit.tail(seed="earliest", projections=("card-activity",)).drain_all([T])
    worker = kit.worker(registry=kit.registry(["card-activity"]))
    assert (await worker.tick_any()).done == 3
    recent = await CardActivity(kit.readmodels).activity(T, "c1")
    assert [(e["seq"], e["actor"], e["type"], e["column"]) for e in recent] == [
        (3, "cy", "card.updated", "inbox"), (2, "bob", "card.updated", "inbox"),
        (1, "ann", "card.updated", "inbox")]
    assert recent[0]["at"] == kit.clock.now() + 3


class Last3(CardActivity):
    name: ClassVar[str] = "last-3"
    keep: ClassVar[int] = 3


@pytest.mark.parametrize("projection", [BoardReflect, CardActivity, Last3])
async def test_builtin_projection_keeps_the_contract_on_the_store(kit: Kit, projection: type) -> None:
    """The contract checks a user calls for their own projection, on this backend's store."""
    await check_projection(projection, store=kit.readmodels)


class TestBoardReflectContract(ProjectionContract):
    projection = BoardReflect


class TestCardActivityContract(ProjectionContract):
    projection = CardActivity


async def test_card_activity_converges_under_repeats_and_any_order(kit: Kit) -> None:
    events = [ev(s, card=f"c{s % 2}") for s in range(1, 11)]
    reference = Last3(kit.readmodels)
    for e in events:
        await reference.apply("ref", e)
    want = {c: await reference.activity("ref", c) for c in ("c0", "c1")}
    assert [e["seq"] for e in want["c0"]] == [10, 8, 6]
    rng = random.Random(3)
    proj = Last3(kit.readmodels)
    shuffled = events + rng.sample(events, 6)  # every event once, six of them twice
    rng.shuffle(shuffled)
    await proj.apply_many(T, shuffled[:7])
    for e in shuffled[7:12]:
        await proj.apply(T, e)
    await proj.apply_many(T, shuffled[12:])
    assert {c: await proj.activity(T, c) for c in ("c0", "c1")} == want


async def test_board_reflect_apply_many_equals_apply_one_by_one(kit: Kit) -> None:
    events = [ev(s, card=f"c{s % 3}") for s in range(1, 13)]
    one = BoardReflect(kit.readmodels)
    for e in events:
        await one.apply("ref", e)
    many = BoardReflect(kit.readmodels)
    rng = random.Random(5)
    shuffled = rng.sample(events, len(events))
    labels = await many.apply_many(T, shuffled[:8]) + await many.apply_many(T, shuffled[8:])
    assert len(labels) == 12 and sum(x == "applied" for x in labels) >= 3

    def strip(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in d.items() if k != "tenant_id"} for d in docs]

    assert strip(await kit.readmodels.list("board-reflect", T)) == strip(
        await kit.readmodels.list("board-reflect", "ref"))


async def test_worker_applies_a_projection_batch_and_marks_it_fenced(kit: Kit) -> None:
    await kit.card(T, "c1")
    await kit.card(T, "c2")
    for i in range(6):
        await kit.emit(T, "card.updated", f"c{1 + i % 2}")
    await kit.tail(seed="earliest", projections=("board-reflect", "card-activity")).drain_all([T])
    reg = kit.registry(["board-reflect", "card-activity"])
    worker = kit.worker(registry=reg, batch_size=50)
    claims = await claim(kit.outbox, T, kit.clock.now(), 30.0, 50)
    units = plan(claims, set(reg.projections), 8)
    assert sorted(len(u) for u in units) == [6, 6]
    reflect = next(u for u in units if u[0].row is not None and u[0].row.projection == "board-reflect")
    # another worker steals one row of the batch (released, then claimed under its own claim_id)
    stolen = reflect[2]
    assert await kit.outbox.apply_claimed(stolen.ref, stolen.claim_id, tr.release(now=kit.clock.now()))
    theirs = await claim(kit.outbox, T, kit.clock.now(), 30.0, 50)
    assert [c.ref for c in theirs] == [stolen.ref]
    # as the worker runs every batch: inside the completer's batching, the marks flushed at its end
    async with worker.completer.batching():
        assert await worker.batch.run(reflect) == ["staged"] * 6
    recorded = {c.ref: o for c, o in worker.completer.recorded}
    worker.completer.recorded.clear()
    assert [recorded[c.ref] for c in reflect] == ["done", "done", "lease_lost", "done", "done", "done"]
    assert stolen.row is not None
    raw = await kit.raw_row(stolen.row.row_key)
    assert raw is not None and raw["state"] == "claimed" and raw["claim_id"] == theirs[0].claim_id
    done = await kit.raw_row(reflect[0].row.row_key)  # type: ignore[union-attr]
    assert done is not None and done["state"] == "done" and done["outcome"].startswith(
        ("applied", "superseded"))
    rest = [c for u in units if u is not reflect for c in u]
    async with worker.completer.batching():
        assert await worker.batch.run(rest) == ["staged"] * 6
    assert [o for _c, o in worker.completer.recorded] == ["done"] * 6
    model = {d["card_id"]: d["last_seq"] for d in await kit.readmodels.list("board-reflect", T)}
    assert model == {"c1": 5, "c2": 6}
    assert [e["seq"] for e in await CardActivity(kit.readmodels).activity(T, "c2")] == [6, 4, 2]


class Flaky(BoardReflect):
    """apply_many always fails; apply fails only for seq 2: the batch falls back to row by row,
    and only the poison row pays (retry with backoff)."""

    name: ClassVar[str] = "flaky"

    async def apply_many(self, tenant_id: str, events: Any) -> list[str]:
        raise RuntimeError("bulk write refused")

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        if event.seq == 2:
            raise RuntimeError("poison")
        return await super().apply(tenant_id, event)


async def test_failed_batch_falls_back_to_rows_and_only_the_bad_row_retries(kit: Kit) -> None:
    await kit.card(T, "c1")
    for _ in range(3):
        await kit.emit(T, "card.updated", "c1")
    await kit.tail(seed="earliest", projections=("flaky",)).drain_all([T])
    reg = kit.registry()
    reg.register_projection(Flaky(kit.readmodels))
    res = await kit.worker(registry=reg).tick_any()
    assert (res.claimed, res.done, res.retried) == (3, 2, 1)
    states = sorted((r.seq, r.state, r.attempts) for r in await kit.rows(T))
    assert states == [(1, "done", 0), (2, "pending", 1), (3, "done", 0)]


async def test_write_groups_spans_models_and_tenants_with_the_fence_per_document(kit: Kit) -> None:
    """One bulk write for several (model, tenant) read models: each group's ops answer as
    ``write_many`` would, each document keeps its newest event (the fence is per document,
    and the same key in two tenants or two models is two documents)."""
    rm = kit.readmodels
    assert await rm.write_many("m", "a", [UpsertIfNewer(key="k", seq=7, doc={"v": "a7"})]) == [True]
    got = await rm.write_groups([
        ReadModelWrites("m", "a", [UpsertIfNewer(key="k", seq=5, doc={"v": "a5"}),  # older
                                   UpsertIfNewer(key="j", seq=1, doc={"v": "a1"})]),
        ReadModelWrites("m", "b", [UpsertIfNewer(key="k", seq=5, doc={"v": "b5"})]),
        ReadModelWrites("n", "a", [UpsertIfNewer(key="k", seq=2, doc={"v": "n2"}),
                                   PushRecent(key="p", seq=3, entry={"x": 3}, keep=2)]),
        ReadModelWrites("m", "c", []),
    ])
    assert got == [[False, True], [True], [True, True], []]
    assert {(m, t, k): (await rm.get(m, t, k) or {}).get("v") for m, t, k in [
        ("m", "a", "k"), ("m", "a", "j"), ("m", "b", "k"), ("n", "a", "k")]} == {
        ("m", "a", "k"): "a7", ("m", "a", "j"): "a1", ("m", "b", "k"): "b5", ("n", "a", "k"): "n2"}
    # again, with one newer: only that one moves
    assert await rm.write_groups([
        ReadModelWrites("m", "b", [UpsertIfNewer(key="k", seq=5, doc={"v": "again"}),
                                   UpsertIfNewer(key="k", seq=6, doc={"v": "b6"})]),
        ReadModelWrites("n", "a", [PushRecent(key="p", seq=3, entry={"x": 3}, keep=2)]),
    ]) == [[False, True], [False]]
    assert (await rm.get("m", "b", "k") or {})["v"] == "b6"
    assert await rm.write_groups([]) == []


class Counting:
    """A ``ReadModelStore`` that counts the calls reaching the store (its bulk writes)."""

    def __init__(self, base: Any) -> None:
        self.base = base
        self.writes: list[tuple[str, int]] = []  # (method, documents written)

    async def write_groups(self, groups: Any) -> list[list[bool]]:
        self.writes.append(("write_groups", sum(len(g.ops) for g in groups)))
        return await self.base.write_groups(groups)  # type: ignore[no-any-return]

    async def write_many(self, model: str, tenant_id: str, ops: Any) -> list[bool]:
        self.writes.append(("write_many", len(ops)))
        return await self.base.write_many(model, tenant_id, ops)  # type: ignore[no-any-return]

    async def upsert_if_newer(self, *args: Any) -> bool:
        self.writes.append(("upsert_if_newer", 1))
        return await self.base.upsert_if_newer(*args)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)


class InOrder(BoardReflect):
    """board-reflect that records each tenant's events as they reach it."""

    name: ClassVar[str] = "in-order"
    seen: ClassVar[dict[str, list[int]]] = {}

    async def apply_many(self, tenant_id: str, events: Any) -> list[str]:
        self.seen.setdefault(tenant_id, []).extend(e.seq for e in events)
        return await super().apply_many(tenant_id, events)

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        return (await self.apply_many(tenant_id, [event]))[0]


async def test_a_claimed_batch_of_one_projection_across_tenants_is_one_bulk_write(kit: Kit) -> None:
    """P2 across tenants: a tick whose claim holds rows of one projection from five tenants
    (two rows each, round-robin) writes them in one bulk write (not one per tenant, nor one per
    row); each tenant's events reach the projection in their order; every row is marked done
    and the read model holds each card's newest event."""
    import dataclasses

    from board_outbox.service.runtime import build_registry

    tenants = [f"t{i}" for i in range(5)]
    for t in tenants:
        for c in ("c1", "c2"):
            await kit.card(t, c)
        for i in range(4):
            await kit.emit(t, "card.updated", f"c{1 + i % 2}")
    await kit.tail(seed="earliest", projections=("in-order",)).drain_all(tenants)
    counting = Counting(kit.readmodels)
    reg = build_registry(dataclasses.replace(kit.stores, readmodels=counting), [])
    InOrder.seen = {}
    from board_outbox.engine.work.gathered import GatheredReadModels

    reg.register_projection(InOrder(GatheredReadModels(counting)))  # as build_registry wraps
    worker = kit.worker(registry=reg, batch_size=10)
    res = await worker.tick_any()
    assert (res.claimed, res.done) == (10, 10)
    assert counting.writes == [("write_groups", 10)]  # one bulk write, every tenant's cards
    assert {t: seqs for t, seqs in InOrder.seen.items()} == {t: [1, 2] for t in tenants}
    res = await worker.tick_any()
    assert (res.claimed, res.done) == (10, 10)
    assert counting.writes[1:] == [("write_groups", 10)]
    assert InOrder.seen == {t: [1, 2, 3, 4] for t in tenants}
    for t in tenants:
        model = {d["card_id"]: d["last_seq"] for d in await kit.readmodels.list("in-order", t)}
        assert model == {"c1": 3, "c2": 4}


class PoisonTenant(BoardReflect):
    """apply_many refuses tenant t1's batch; apply fails for t1's seq 2 only."""

    name: ClassVar[str] = "poison-tenant"

    async def apply_many(self, tenant_id: str, events: Any) -> list[str]:
        if tenant_id == "t1":
            raise RuntimeError("t1 refused")
        return await super().apply_many(tenant_id, events)

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        if tenant_id == "t1" and event.seq == 2:
            raise RuntimeError("poison")
        return await super().apply(tenant_id, event)


async def test_a_tenant_whose_batched_apply_fails_costs_only_its_own_rows(kit: Kit) -> None:
    """In a unit across tenants, one tenant's failed apply_many sends only its rows one by one
    (its poison row retries); the other tenants' rows of the unit are written together and
    marked done."""
    for t in ("t0", "t1", "t2"):
        await kit.card(t, "c1")
        for _ in range(2):
            await kit.emit(t, "card.updated", "c1")
    await kit.tail(seed="earliest", projections=("poison-tenant",)).drain_all(["t0", "t1", "t2"])
    reg = kit.registry()
    reg.register_projection(PoisonTenant(kit.readmodels))
    res = await kit.worker(registry=reg, batch_size=10).tick_any()
    assert (res.claimed, res.done, res.retried) == (6, 5, 1)
    states = sorted((r.tenant_id, r.seq, r.state) for r in await kit.rows())
    assert states == [("t0", 1, "done"), ("t0", 2, "done"), ("t1", 1, "done"),
                      ("t1", 2, "pending"), ("t2", 1, "done"), ("t2", 2, "done")]
