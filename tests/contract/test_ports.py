"""Port contracts: every backend's adapters must behave alike (memory twins, Mongo adapters)."""

from __future__ import annotations

import anyio
import pytest

from board_outbox.model import transitions as tr
from board_outbox.model.board import Card, EventSnapshot
from board_outbox.model.errors import CardNotFound, MalformedCard, SubscriptionNotFound
from board_outbox.model.rows import EffectRow, ErrorEntry, new_launch_row, new_projection_row
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import RowFilter
from tests.support.kits import Kit, claim

pytestmark = pytest.mark.anyio

T = "t1"


def _row(seq: int, sub: str = "s1", tenant: str = T, now: float = 100.0) -> EffectRow:
    ev = EventSnapshot(seq=seq, type="card.created", card_id=f"c{seq}")
    s = Subscription(sub_id=sub, tenant_id=tenant, bot="b")
    return new_launch_row(tenant, ev, s, now)


# --- event log ----------------------------------------------------------------------------


async def test_event_log_reads_in_seq_order_after_cursor(kit: Kit) -> None:
    for i in range(5):
        assert await kit.emit(T, "card.created", f"c{i}") == i + 1
    await kit.emit("other", "card.created", "x")
    recs = await kit.events.read_after(T, 2, 2)
    assert [r.seq for r in recs] == [3, 4]
    assert recs[0].doc["card_id"] == "c2"
    assert [r.seq for r in await kit.events.read_after(T, 0, 100)] == [1, 2, 3, 4, 5]
    assert await kit.events.tenants() >= {T, "other"}


async def test_allocation_precedes_insert_and_max_inserted_ignores_holes(kit: Kit) -> None:
    await kit.emit(T, "card.created", "a")  # seq 1
    s2 = await kit.events.allocate_seq(T)  # allocated, insert "in flight"
    s3 = await kit.events.allocate_seq(T)
    assert (s2, s3) == (2, 3)
    assert await kit.events.allocated_seq(T) == 3
    assert await kit.events.max_inserted_seq(T) == 1
    await kit.events.insert({"tenant_id": T, "seq": 3, "type": "card.created", "card_id": "c"})
    assert await kit.events.max_inserted_seq(T) == 3
    assert [r.seq for r in await kit.events.read_after(T, 0, 10)] == [1, 3]
    assert await kit.events.max_inserted_seq("nobody") == 0


# --- cursors ------------------------------------------------------------------------------


async def test_cursor_seed_and_compare_and_set(kit: Kit) -> None:
    assert await kit.cursors.get(T) is None
    assert await kit.cursors.seed(T, 5) == 5
    assert await kit.cursors.seed(T, 9) == 5  # already there: the existing value wins
    assert await kit.cursors.compare_and_set(T, 5, 8)
    assert not await kit.cursors.compare_and_set(T, 5, 9)  # lost race
    assert await kit.cursors.get(T) == 8


async def test_racing_cas_has_exactly_one_winner(kit: Kit) -> None:
    await kit.cursors.seed(T, 0)
    wins: list[int] = []

    async def attempt(n: int) -> None:
        if await kit.cursors.compare_and_set(T, 0, n):
            wins.append(n)

    async with anyio.create_task_group() as tg:
        for n in range(1, 9):
            tg.start_soon(attempt, n)
    assert len(wins) == 1
    assert await kit.cursors.get(T) == wins[0]


# --- outbox -------------------------------------------------------------------------------


async def test_upsert_is_set_on_insert(kit: Kit) -> None:
    r1 = await kit.outbox.upsert_rows([_row(1), _row(2)])
    assert (r1.inserted, r1.existing) == (2, 0)
    changed = _row(1, now=999.0)
    r2 = await kit.outbox.upsert_rows([changed, _row(3)])
    assert (r2.inserted, r2.existing) == (1, 1)
    stored = await kit.outbox.get(changed.row_key)
    assert stored is not None and stored.created_at == 100.0  # first insert wins
    assert len(await kit.rows(T)) == 3


async def test_racing_upserts_collapse_on_row_key(kit: Kit) -> None:
    rows = [_row(i) for i in range(1, 21)]

    async def write() -> None:
        await kit.outbox.upsert_rows(rows)

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(write)
    assert sorted(r.seq for r in await kit.rows(T)) == list(range(1, 21))


async def test_launch_and_projection_keys_never_collide(kit: Kit) -> None:
    ev = EventSnapshot(seq=1, type="t", card_id="c")
    sub = Subscription(sub_id="proj", tenant_id=T, bot="b")
    launch = new_launch_row(T, ev, sub, 1.0)
    proj = new_projection_row(T, ev, "proj", 1.0)
    assert launch.row_key != proj.row_key
    assert (await kit.outbox.upsert_rows([launch, proj])).inserted == 2
    got = await kit.outbox.get(proj.row_key)
    assert got is not None and got.kind == "projection" and got.sub_id is None


async def test_row_without_kind_decodes_as_launch(kit: Kit) -> None:
    await kit.insert_raw_row(
        {"tenant_id": T, "row_key": "legacy/1", "seq": 1, "sub_id": "s", "state": "pending",
         "attempts": 0, "not_before": 0.0}
    )
    row = await kit.outbox.get("legacy/1")
    assert row is not None and row.kind == "launch"


async def test_claim_is_atomic_and_leased(kit: Kit) -> None:
    await kit.outbox.upsert_rows([_row(i) for i in range(1, 11)])
    now = kit.clock.now()
    claimed: list[str] = []

    async def claimer() -> None:
        # a claim that loses a race for its picked rows takes fewer (the next tick takes more):
        # each claimer claims until nothing is left
        while got := await claim(kit.outbox, T, now, 30.0, 4):
            for c in got:
                assert c.row is not None
                claimed.append(c.row.row_key)

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(claimer)
    assert len(claimed) == 10 and len(set(claimed)) == 10  # every row once, none twice
    assert await claim(kit.outbox, T, now + 29.0, 30.0, 10) == []  # leases hold
    assert (await kit.outbox.count_by_state(T)) == {"claimed": 10}


async def test_claim_respects_not_before_and_tenant(kit: Kit) -> None:
    later = _row(1)
    later.not_before = kit.clock.now() + 60
    await kit.outbox.upsert_rows([later, _row(2, tenant="t2")])
    assert await claim(kit.outbox, T, kit.clock.now(), 30.0, 10) == []
    got = await claim(kit.outbox, T, kit.clock.now() + 61, 30.0, 10)
    assert [c.row.seq for c in got if c.row] == [1]
    assert await kit.outbox.live_tenants() == {T, "t2"}


async def test_fencing_and_reclaim(kit: Kit) -> None:
    await kit.outbox.upsert_rows([_row(1)])
    now = kit.clock.now()
    (first,) = await claim(kit.outbox, T, now, 10.0, 1)
    # the lease expires; another worker reclaims: attempts +1, a lease_expired error entry
    (second,) = await claim(kit.outbox, T, now + 11, 10.0, 1)
    assert second.reclaimed and second.claim_id != first.claim_id
    assert second.row is not None and second.row.attempts == 1
    assert second.row.errors[-1].kind == "lease_expired"
    # the first worker's late writes are no-ops
    assert not await kit.outbox.apply_claimed(
        first.ref, first.claim_id, tr.done(now=now + 12, outcome="late"))
    assert not await kit.outbox.apply_claimed(first.ref, first.claim_id, tr.consumed(now=now + 12))
    err = ErrorEntry(attempt=1, at=now, error="x")
    assert not await kit.outbox.apply_claimed(
        first.ref, first.claim_id, tr.retry(now=now + 12, error=err, not_before=now))
    assert not await kit.outbox.apply_claimed(
        first.ref, first.claim_id, tr.park(now=now + 12, error=err, count_attempt=True))
    assert not await kit.outbox.apply_claimed(first.ref, first.claim_id, tr.release(now=now + 12))
    assert await kit.outbox.apply_claimed(second.ref, second.claim_id, tr.done(now=now + 12, outcome="ok"))
    row = await kit.outbox.get(_row(1).row_key)
    assert row is not None and row.state == "done" and row.outcome == "ok"
    assert row.done_at is not None


async def test_retry_failed_release_and_consume_marks(kit: Kit) -> None:
    await kit.outbox.upsert_rows([_row(1), _row(2), _row(3)])
    now = kit.clock.now()
    c1, c2, c3 = await claim(kit.outbox, T, now, 30.0, 3)
    assert await kit.outbox.apply_claimed(c1.ref, c1.claim_id, tr.consumed(now=now))
    err = ErrorEntry(attempt=1, at=now, error="boom")
    assert await kit.outbox.apply_claimed(
        c1.ref, c1.claim_id, tr.retry(now=now, error=err, not_before=now + 5))
    assert await kit.outbox.apply_claimed(
        c2.ref, c2.claim_id, tr.park(now=now, error=err, count_attempt=True))
    assert await kit.outbox.apply_claimed(c3.ref, c3.claim_id, tr.release(now=now))
    r1 = await kit.outbox.get(_row(1).row_key)
    r2 = await kit.outbox.get(_row(2).row_key)
    r3 = await kit.outbox.get(_row(3).row_key)
    assert r1 and r1.state == "pending" and r1.attempts == 1 and r1.consume_marked
    assert r1.not_before == now + 5 and [e.error for e in r1.errors] == ["boom"]
    assert r2 and r2.state == "failed" and r2.attempts == 1
    assert r3 and r3.state == "pending" and r3.attempts == 0 and r3.claim_id is None
    assert await kit.outbox.count_by_state(T) == {"pending": 2, "failed": 1}
    # dead-letters are queryable, replayable (history kept, audited) and purgeable
    dead = await kit.outbox.find(RowFilter(tenant_id=T, states=("failed",)))
    assert [d.row_key for d in dead] == [_row(2).row_key]
    assert await kit.outbox.apply_failed(_row(2).row_key, tr.replay(now=now + 1, by="tester"))
    again = await kit.outbox.get(_row(2).row_key)
    assert again and again.state == "pending" and again.attempts == 0
    assert [e.error for e in again.errors] == ["boom"] and again.audit[-1].by == "tester"
    # not failed: refused
    assert not await kit.outbox.apply_failed(_row(1).row_key, tr.replay(now=now, by="x"))
    (c,) = await claim(kit.outbox, T, now + 1, 30.0, 1)
    assert await kit.outbox.apply_claimed(
        c.ref, c.claim_id, tr.park(now=now + 2, error=err, count_attempt=True))
    assert await kit.outbox.purge(RowFilter(tenant_id=T)) == 1
    assert await kit.outbox.count_by_state(T) == {"pending": 2}


async def test_malformed_row_is_claimed_with_decode_error(kit: Kit) -> None:
    await kit.insert_raw_row(
        {"tenant_id": T, "row_key": "bad/1", "seq": "not-a-number", "state": "pending",
         "not_before": 0.0}
    )
    (c,) = await claim(kit.outbox, T, kit.clock.now(), 30.0, 5)
    assert c.row is None and c.decode_error and "seq" in c.decode_error


# --- subscriptions, cards, labels, read models ------------------------------------------


async def test_subscriptions(kit: Kit) -> None:
    s = Subscription(sub_id="s1", tenant_id=T, bot="b", rule=MatchRule(column="x"))
    await kit.subs.put(s)
    await kit.subs.put(Subscription(sub_id="s2", tenant_id="t2", bot="b", enabled=False))
    assert await kit.subs.get("s1") == s
    assert [x.sub_id for x in await kit.subs.list_for_tenant(T)] == ["s1"]
    assert await kit.subs.tenants() == {T}  # disabled subscriptions do not make a tenant
    await kit.subs.delete("s1")
    with pytest.raises(SubscriptionNotFound):
        await kit.subs.get("s1")


async def test_cards_and_atomic_label_consume(kit: Kit) -> None:
    await kit.card(T, "c1", labels=("ship", "bug"))
    assert (await kit.cards.get(T, "c1")).labels == ("ship", "bug")
    with pytest.raises(CardNotFound):
        await kit.cards.get(T, "nope")
    results: list[str] = []

    async def consume(row: str) -> None:
        results.append(await kit.labels.consume(T, "c1", ["ship"], by=row))

    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(consume, f"row{i}")
    assert sorted(results) == ["absent", "absent", "absent", "consumed"]  # spent exactly once
    assert (await kit.cards.get(T, "c1")).labels == ("bug",)
    assert await kit.labels.consume(T, "c1", ["bug", "ship"], by="other") == "absent"  # all-or-nothing
    assert (await kit.cards.get(T, "c1")).labels == ("bug",)
    with pytest.raises(CardNotFound):
        await kit.labels.consume(T, "gone", ["x"], by="r")


async def test_label_consume_is_idempotent_per_row(kit: Kit) -> None:
    """A retry of the row that spent the one-shot learns it was its own; a new label added
    later is not spent a second time by that row."""
    await kit.card(T, "c1", labels=("ship",))
    assert await kit.labels.consume(T, "c1", ["ship"], by="rowA") == "consumed"
    assert await kit.labels.consume(T, "c1", ["ship"], by="rowA") == "already"
    assert await kit.labels.consume(T, "c1", ["ship"], by="rowB") == "absent"
    await kit.card(T, "c1", labels=("ship",))  # the board re-labels the card: a new one-shot
    assert await kit.labels.consume(T, "c1", ["ship"], by="rowA") == "already"  # not re-spent
    assert (await kit.cards.get(T, "c1")).labels == ("ship",)
    assert await kit.labels.consume(T, "c1", ["ship"], by="rowB") == "consumed"
    await kit.put_raw_card(T, "bad", {"tenant_id": T, "card_id": "bad", "labels": "oops"})
    with pytest.raises(MalformedCard):
        await kit.cards.get(T, "bad")
    await kit.cards.delete(T, "c1")
    with pytest.raises(CardNotFound):
        await kit.cards.get(T, "c1")


async def test_read_model_seq_guard(kit: Kit) -> None:
    rm = kit.readmodels
    assert await rm.upsert_if_newer("m", T, "k", 5, {"v": 5})
    assert not await rm.upsert_if_newer("m", T, "k", 5, {"v": 55})
    assert not await rm.upsert_if_newer("m", T, "k", 3, {"v": 3})
    assert await rm.upsert_if_newer("m", T, "k", 7, {"v": 7})
    doc = await rm.get("m", T, "k")
    assert doc is not None and doc["v"] == 7 and doc["last_seq"] == 7
    assert [d["key"] for d in await rm.list("m", T)] == ["k"]
    assert await rm.reset("m", T) == 1
    assert await rm.list("m", T) == []


def test_card_struct_is_hashable_value() -> None:
    assert Card(tenant_id="t", card_id="c") == Card(tenant_id="t", card_id="c")


async def test_get_many_fetches_a_batch_in_one_call(kit: Kit) -> None:
    await kit.card(T, "a", column="x")
    await kit.card(T, "b")
    await kit.put_raw_card(T, "bad", {"tenant_id": T, "card_id": "bad", "labels": 3})
    got = await kit.cards.get_many(T, ["a", "b", "bad", "gone"])
    assert set(got) == {"a", "b", "bad"}  # "gone" is absent: deleted
    assert isinstance(got["a"], Card) and got["a"].column == "x"
    assert isinstance(got["bad"], MalformedCard)
    assert await kit.cards.get_many(T, []) == {}
    assert kit.faults.hits["cards.get_many"] == 2


async def test_counts_by_state_asked_by_state_agree_with_the_whole_count(kit: Kit) -> None:
    """The gauges' path (``states=``: one count per state over its index; the done rows of every
    tenant estimated from the collection's size) gives the figures the whole count gives."""
    await kit.outbox.upsert_rows([_row(i) for i in range(1, 7)] + [_row(9, tenant="t2")])
    now = kit.clock.now()
    c1, c2, c3, _still_claimed = await claim(kit.outbox, T, now, 30.0, 4)
    assert await kit.outbox.apply_claimed(c1.ref, c1.claim_id, tr.done(now=now, outcome="ok"))
    assert await kit.outbox.apply_claimed(c2.ref, c2.claim_id, tr.done(now=now, outcome="ok"))
    err = ErrorEntry(attempt=1, at=now, error="boom")
    assert await kit.outbox.apply_claimed(
        c3.ref, c3.claim_id, tr.park(now=now, error=err, count_attempt=True))
    whole = await kit.outbox.count_by_state()
    assert whole == {"done": 2, "failed": 1, "claimed": 1, "pending": 3}
    every = ["pending", "claimed", "failed", "done"]
    assert await kit.outbox.count_by_state(states=every) == whole
    assert await kit.outbox.count_by_state(states=["done", "failed"]) == {"done": 2, "failed": 1}
    assert await kit.outbox.count_by_state(states=["pending"]) == {"pending": 3}
    assert await kit.outbox.count_by_state(T, states=every) == {
        "done": 2, "failed": 1, "claimed": 1, "pending": 2}
    assert await kit.outbox.count_by_state("t2", states=["done", "pending"]) == {"pending": 1}
