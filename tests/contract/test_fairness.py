"""F1 on every backend: a claim takes due rows round-robin by tenant, so one tenant's backlog
delays another tenant's rows by at most about one claim; a tenant's rows are claimed in order;
and another owner's row is taken once it is old measured from its materialization."""

from __future__ import annotations

import pytest

from board_outbox.model.domain import EventSnapshot, MatchRule, Subscription, new_launch_row
from board_outbox.model.fairness import pick, round_robin
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio


def sub(tenant: str) -> Subscription:
    return Subscription(sub_id=f"{tenant}.s", tenant_id=tenant, bot="bot",
                        rule=MatchRule(event_types=("card.created",)))


async def backlog(kit: Kit, counts: dict[str, int]) -> None:
    """``counts[t]`` events of one card for each tenant, materialized tenant by tenant in the
    order given, one second apart: the first tenant's rows are the oldest."""
    for tenant, n in counts.items():
        await kit.sub(sub(tenant))
        await kit.card(tenant, "c")
        for _ in range(n):
            await kit.emit(tenant, "card.created", "c")
        await kit.tail(seed="earliest").drain_all([tenant])
        kit.clock.advance(1)


async def test_a_claim_smaller_than_the_due_rows_takes_rows_of_every_tenant(kit: Kit) -> None:
    await backlog(kit, {"noisy": 12, "q1": 1, "q2": 1})
    claims = await kit.outbox.claim_any(kit.clock.now(), 30, 3)
    assert sorted(c.tenant_id for c in claims) == ["noisy", "q1", "q2"]
    # the same with ownership on (the owned tenants' rows round-robin first)
    await backlog(kit, {"q3": 1})
    owned = {"noisy", "q1", "q2", "q3"}
    claims = await kit.outbox.claim_any(kit.clock.now(), 30, 2, prefer=owned,
                                        steal_before=kit.clock.now() - 1)
    assert sorted(c.tenant_id for c in claims) == ["noisy", "q3"]


async def test_rows_of_a_tenant_are_claimed_in_order_and_interleaved(kit: Kit) -> None:
    await backlog(kit, {"noisy": 6, "quiet": 2})
    order: list[tuple[str, int]] = []
    claims = await kit.outbox.claim_any(kit.clock.now(), 30, 2)
    while claims:
        assert claims[0].row is not None
        batch = [(c.tenant_id, c.row.seq) for c in claims if c.row is not None]
        order += batch
        if len(order) <= 4:  # while both have due rows, every claim takes one of each
            assert {t for t, _ in batch} == {"noisy", "quiet"}
        claims = await kit.outbox.claim_any(kit.clock.now(), 30, 2)
    assert [s for t, s in order if t == "noisy"] == [1, 2, 3, 4, 5, 6]
    assert [s for t, s in order if t == "quiet"] == [1, 2]


async def test_another_owners_row_is_stolen_by_its_materialization_time(kit: Kit) -> None:
    """A retried row (due now, materialized long ago) of a tenant another replica owns is
    overdue; a fresh one is left to its owner."""
    now = kit.clock.now()
    ev = EventSnapshot(seq=1, type="card.created", card_id="c")
    old = new_launch_row("b", ev, sub("b"), now - 10)
    old.not_before = now  # its retry is due now
    fresh = new_launch_row("c", ev, sub("c"), now)
    await kit.outbox.upsert_rows([old, fresh])
    claims = await kit.outbox.claim_any(now, 30, 10, prefer={"a"}, steal_before=now - 1)
    assert [c.tenant_id for c in claims] == ["b"]


def test_round_robin_keeps_each_tenants_order() -> None:
    rows = [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("c", 1), ("b", 2)]
    assert round_robin(rows, lambda r: r[0]) == [
        ("a", 1), ("b", 1), ("c", 1), ("a", 2), ("b", 2), ("a", 3)]
    docs = [{"tenant_id": t, "seq": s, "created_at": 0.0} for t, s in rows]
    assert [(d["tenant_id"], d["seq"]) for d in pick(docs, 4, prefer={"c"}, steal_before=0.0)] \
        == [("c", 1), ("a", 1), ("b", 1), ("a", 2)]
    assert pick(docs, 4, prefer={"c"}, steal_before=-1.0) == [docs[4]]  # nothing old enough


async def test_the_tail_drains_one_batch_per_tenant_per_round(kit: Kit) -> None:
    """A tenant's backlog holds up another tenant's events by one tail batch, not by the whole
    backlog; ``rounds=1`` (the service's pass) leaves the rest for the next pass."""
    for tenant, n in {"noisy": 7, "quiet": 1}.items():
        await kit.sub(sub(tenant))
        await kit.card(tenant, "c")
        for _ in range(n):
            await kit.emit(tenant, "card.created", "c")
    tail = kit.tail(seed="earliest", batch_size=3)
    first = await tail.drain_all(["noisy", "quiet"], rounds=1)
    assert [(r.tenant_id, r.materialized) for r in first] == [("noisy", 3), ("quiet", 1)]
    assert [tail.more_behind(r) for r in first] == [True, False]
    await kit.emit("quiet", "card.created", "c")
    rest = await tail.drain_all(["noisy", "quiet"])
    assert [(r.tenant_id, r.materialized) for r in rest] == [
        ("noisy", 3), ("quiet", 1), ("noisy", 1)]
    assert len(await kit.rows()) == 9


async def test_tail_batches_are_cut_to_the_measured_pace(kit: Kit) -> None:
    """On a store slower than ``batch_seconds`` per batch, the next batches shrink (never below
    50 events), so a backlog holds up the other tenants by about ``batch_seconds`` per round."""
    await kit.sub(sub("noisy"))
    await kit.card("noisy", "c")
    for _ in range(300):
        await kit.emit("noisy", "card.created", "c")
    tail = kit.tail(seed="earliest", batch_size=200, batch_seconds=1e-9)
    results = await tail.drain_all(["noisy"])
    # the last full batch may have had more behind it: one more (empty) read says it did not
    assert [r.materialized for r in results] == [200, 50, 50, 0]
    assert [r.limit for r in results] == [200, 50, 50, 50]
    assert len(await kit.rows()) == 300
