"""The hand-off (issue 23): the rows the tail just inserted go to its own worker, which claims
them by ref (``EffectOutbox.claim_fresh``) instead of picking -- on every backend. A handed row
is claimed like a picked one (claim_id, lease, fenced marks) and only while it is still as
inserted: a row another replica took, that ran, was deleted or is not due is left alone."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from board_outbox.engine.worker import HANDOFF_BATCHES, PICK_IDLES, EffectWorker
from board_outbox.model import transitions as tr
from board_outbox.model.domain import (
    EffectRow,
    ErrorEntry,
    EventSnapshot,
    MatchRule,
    Subscription,
    new_launch_row,
)
from board_outbox.model.errors import StoreUnavailable
from board_outbox.ports import EffectOutbox, FreshRow
from tests.support.faults import Crash
from tests.support.kits import Kit, claim

pytestmark = pytest.mark.anyio

T = "t1"
SUB = Subscription(sub_id="s", tenant_id=T, bot="bot",
                   rule=MatchRule(event_types=("card.created",)))


def _row(seq: int, tenant: str = T, now: float = 100.0) -> EffectRow:
    ev = EventSnapshot(seq=seq, type="card.created", card_id=f"c{seq}")
    return new_launch_row(tenant, ev, Subscription(sub_id="s1", tenant_id=tenant, bot="b"), now)


async def _fresh(kit: Kit, rows: list[EffectRow]) -> list[FreshRow]:
    res = await kit.outbox.upsert_rows(rows)
    assert res.inserted == len(rows) and len(res.fresh) == len(rows)
    return list(res.fresh)


class PickSpy:
    """The outbox, counting the worker's due-row picks (``claim_any``)."""

    def __init__(self, outbox: EffectOutbox) -> None:
        self._outbox, self.picks = outbox, 0

    async def claim_any(self, *args: Any, **kwargs: Any) -> Any:
        self.picks += 1
        return await self._outbox.claim_any(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._outbox, name)


def spied(worker: EffectWorker) -> PickSpy:
    spy = PickSpy(worker.outbox)
    worker.outbox = spy  # type: ignore[assignment]
    return spy


# --- the port -------------------------------------------------------------------------------


async def test_upsert_returns_only_the_rows_it_inserted(kit: Kit) -> None:
    await kit.outbox.upsert_rows([_row(1)])
    res = await kit.outbox.upsert_rows([_row(1), _row(2), _row(3)])
    assert (res.inserted, res.existing) == (2, 1)
    assert [f.row.seq for f in res.fresh] == [2, 3]
    assert len({repr(f.ref) for f in res.fresh}) == 2


async def test_claim_fresh_claims_by_ref_like_a_pick(kit: Kit) -> None:
    fresh = await _fresh(kit, [_row(1), _row(2)])
    now = kit.clock.now()
    claims = await kit.outbox.claim_fresh(fresh, now, 30.0)
    assert [c.ref for c in claims] == [f.ref for f in fresh]
    assert len({c.claim_id for c in claims}) == 1 and claims[0].lease_until >= now + 30.0
    for c in claims:  # the claim's row is the row as the store now holds it
        assert c.row is not None and not c.reclaimed
        assert c.row == await kit.outbox.get(c.row.row_key)
        assert (c.row.state, c.row.claim_id) == ("claimed", c.claim_id)
    # claimed once: neither a second hand-off nor a pick takes them while the lease holds
    assert await kit.outbox.claim_fresh(fresh, now, 30.0) == []
    assert await claim(kit.outbox, T, now + 29.0, 30.0, 10) == []
    # fenced like any claim (M8): a mark under another claim_id is a no-op
    first = claims[0]
    assert not await kit.outbox.apply_claimed(first.ref, "not-ours", tr.done(now=now, outcome="x"))
    assert await kit.outbox.apply_claimed(first.ref, first.claim_id, tr.done(now=now, outcome="ok"))


async def test_claim_fresh_leaves_rows_that_are_no_longer_as_inserted(kit: Kit) -> None:
    """Hostile hand-offs: a row another replica claimed, one that ran (done), one deleted, one
    not due yet, one back to pending after a retry (backoff over), one released: none is
    claimed, none is written; only the untouched row is."""
    now = kit.clock.now()
    later = _row(4)
    later.not_before = now + 60
    fresh = await _fresh(kit, [_row(1), _row(2), _row(3), later, _row(5), _row(6), _row(7)])
    by_seq = {f.row.seq: f for f in fresh}
    taken = await kit.outbox.claim_fresh([by_seq[1]], now, 30.0)  # another replica's claim
    (done,) = await kit.outbox.claim_fresh([by_seq[2]], now, 30.0)
    assert await kit.outbox.apply_claimed(done.ref, done.claim_id, tr.done(now=now, outcome="ok"))
    assert kit.delete_raw_row is not None
    await kit.delete_raw_row(by_seq[3].row.row_key)
    (retried,) = await kit.outbox.claim_fresh([by_seq[5]], now, 30.0)
    err = ErrorEntry(attempt=1, at=now, error="boom")
    assert await kit.outbox.apply_claimed(retried.ref, retried.claim_id,
                                          tr.retry(now=now + 1, error=err, not_before=now + 2))
    (released,) = await kit.outbox.claim_fresh([by_seq[6]], now, 30.0)
    assert await kit.outbox.apply_claimed(released.ref, released.claim_id, tr.release(now=now + 1))
    before = {f.row.row_key: await kit.raw_row(f.row.row_key) for f in fresh}
    got = await kit.outbox.claim_fresh(fresh, now + 5, 30.0)
    assert [c.row.seq for c in got if c.row is not None] == [7]
    for f in fresh:
        if f.row.seq != 7:
            assert await kit.raw_row(f.row.row_key) == before[f.row.row_key]
    assert taken[0].claim_id == (await kit.raw_row(by_seq[1].row.row_key) or {})["claim_id"]
    # not due yet: claimed once due
    assert [c.row.seq for c in await kit.outbox.claim_fresh([by_seq[4]], now + 61, 30.0)
            if c.row is not None] == [4]


async def test_claim_fresh_of_nothing_is_nothing(kit: Kit) -> None:
    assert await kit.outbox.claim_fresh([], kit.clock.now(), 30.0) == []


# --- the worker -----------------------------------------------------------------------------


async def materialize(kit: Kit, n: int, tenant: str = T) -> list[FreshRow]:
    await kit.sub(msgspec.structs.replace(SUB, tenant_id=tenant, sub_id=f"{tenant}.s"))
    for i in range(1, n + 1):
        await kit.card(tenant, f"c{i}")
        await kit.emit(tenant, "card.created", f"c{i}")
    results = await kit.tail(seed="earliest").drain_all([tenant])
    fresh = [f for r in results for f in r.fresh]
    assert len(fresh) == n and sum(r.rows_inserted for r in results) == n
    return fresh


async def test_worker_claims_handed_rows_without_a_pick(kit: Kit) -> None:
    worker = kit.worker(batch_size=8, idle_seconds=1.0)
    spy = spied(worker)
    worker.hand_off([])
    assert (await worker.tick_any()).claimed == 0 and spy.picks == 1  # the first tick picks
    worker.hand_off(await materialize(kit, 3))
    res = await worker.tick_any()  # within idle_seconds of that pick: the hand-off only
    assert (res.claimed, res.done, spy.picks) == (3, 3, 1)
    assert sorted(r.seq for r in kit.launcher.launches) == [1, 2, 3]
    assert {r.state for r in await kit.rows(T)} == {"done"}
    kit.clock.advance(PICK_IDLES * 1.0 - 0.01)
    assert (await worker.tick_any()).claimed == 0 and spy.picks == 1
    kit.clock.advance(0.01)
    assert (await worker.tick_any()).claimed == 0 and spy.picks == 2  # the pick's schedule


async def test_rows_not_handed_are_picked_on_the_pick_schedule(kit: Kit) -> None:
    """Another replica's tail wrote the rows (no hand-off here): this worker, fed by its own
    tail, still finds them with its pick, at the latest ``PICK_IDLES * idle_seconds`` after its
    last one."""
    worker = kit.worker(batch_size=8, idle_seconds=1.0)
    worker.hand_off([])
    await worker.tick_any()
    await materialize(kit, 2)  # not handed to this worker
    assert (await worker.tick_any()).claimed == 0
    kit.clock.advance(PICK_IDLES * 1.0)
    assert (await worker.tick_any()).done == 2


async def test_a_lost_handed_row_runs_once(kit: Kit) -> None:
    """Two workers handed the same rows (a replica's stale hand-off): each row runs once."""
    fresh = await materialize(kit, 4)
    a, b = kit.worker(batch_size=8), kit.worker(batch_size=8)
    a.hand_off(fresh[:3])
    b.hand_off(fresh[1:])
    ra, rb = await a.tick_any(), await b.tick_any()
    assert ra.done + rb.done == 4
    assert sorted(r.seq for r in kit.launcher.launches) == [1, 2, 3, 4]


async def test_hand_off_does_not_starve_other_tenants(kit: Kit) -> None:
    """F1: a hand-off bigger than the claim takes at most half of it when the pick runs; the
    other half is the fair pick's, which finds the other tenant's due rows."""
    await materialize(kit, 2, tenant="t2")  # due, not handed
    fresh = await materialize(kit, 12)
    worker = kit.worker(batch_size=4, idle_seconds=1.0)
    worker.hand_off(fresh)
    res = await worker.tick_any()
    assert res.claimed == 4
    done_t2 = [r for r in await kit.rows("t2") if r.state == "done"]
    assert len(done_t2) >= 1, "the other tenant's rows waited behind the hand-off"
    for _ in range(10):
        kit.clock.advance(PICK_IDLES * 1.0)
        await worker.tick_any()
    assert {r.state for r in await kit.rows()} == {"done"}
    assert len(kit.launcher.launches) == 14


async def test_hand_off_is_bounded(kit: Kit) -> None:
    """The hand-off holds a few claims' worth; rows beyond it are left to the pick."""
    worker = kit.worker(batch_size=2, idle_seconds=1.0)
    worker.hand_off(await materialize(kit, 12))
    assert worker.handed == 2 * HANDOFF_BATCHES
    for _ in range(10):
        await worker.tick_any()
        kit.clock.advance(PICK_IDLES * 1.0)
    assert {r.state for r in await kit.rows()} == {"done"}
    assert sorted(r.seq for r in kit.launcher.launches) == list(range(1, 13))


async def test_a_failed_hand_off_claim_leaves_the_rows_to_the_pick(kit: Kit) -> None:
    """The store is down for the hand-off's claim: the tick fails (the service logs it and
    ticks again), nothing was claimed, and the pick runs the rows, once."""
    worker = kit.worker(batch_size=8, idle_seconds=1.0)
    worker.hand_off([])
    await worker.tick_any()
    worker.hand_off(await materialize(kit, 3))
    kit.faults.fail_at("outbox.claim_fresh")
    with pytest.raises(StoreUnavailable):
        await worker.tick_any()
    assert {r.state for r in await kit.rows(T)} == {"pending"}
    kit.clock.advance(PICK_IDLES * 1.0)
    assert (await worker.tick_any()).done == 3
    assert sorted(r.seq for r in kit.launcher.launches) == [1, 2, 3]


async def test_a_worker_that_dies_after_the_hand_off_claim_loses_only_the_lease(kit: Kit) -> None:
    """The hand-off's claim is written, then the replica dies: the rows are held by the lease
    like any claim's; once it expires another worker reclaims them (the lost attempt counted,
    M9) and each runs once."""
    worker = kit.worker(batch_size=8, lease_seconds=30.0)
    worker.hand_off(await materialize(kit, 2))
    kit.faults.crash_at("outbox.claim_fresh.after")
    with pytest.raises(Crash):
        await worker.tick_any()
    assert {r.state for r in await kit.rows(T)} == {"claimed"}
    other = kit.worker(batch_size=8, lease_seconds=30.0)
    assert (await other.tick_any()).claimed == 0  # the lease holds
    kit.clock.advance(31.0)
    res = await other.tick_any()
    assert (res.claimed, res.done) == (2, 2)
    assert sorted(r.seq for r in kit.launcher.launches) == [1, 2]
    assert {r.attempts for r in await kit.rows(T)} == {1}


async def test_a_failed_pick_after_the_hand_off_claim_still_runs_the_handed_rows(kit: Kit) -> None:
    """The hand-off's claim succeeded, then the pick fails (a store blip): the claimed rows run
    in this tick rather than wait out their lease; the next due pick tries again."""
    worker = kit.worker(batch_size=8, idle_seconds=1.0)
    spy = spied(worker)
    worker.hand_off(await materialize(kit, 3))
    kit.faults.fail_at("outbox.claim_any")
    res = await worker.tick_any()  # the first tick: the pick is due, and fails
    assert (res.claimed, res.done, spy.picks) == (3, 3, 1)
    assert {r.state for r in await kit.rows(T)} == {"done"}
    with pytest.raises(StoreUnavailable):  # nothing claimed: the failure is the tick's
        kit.faults.fail_at("outbox.claim_any")
        await worker.tick_any()


async def test_a_quiet_tenants_handed_row_is_not_queued_behind_a_burst(kit: Kit) -> None:
    """F1 in the hand-off too: a noisy tenant's fresh rows fill it, then one quiet tenant's row
    arrives; the next claim takes the quiet row (round-robin by tenant), each tenant's rows in
    their order."""
    worker = kit.worker(batch_size=2, idle_seconds=1.0)
    worker.hand_off([])
    await worker.tick_any()  # the first tick's pick, before any row exists
    noisy = await materialize(kit, 6, tenant="noisy")
    quiet = await materialize(kit, 1, tenant="quiet")
    worker.hand_off(noisy)
    worker.hand_off(quiet)
    res = await worker.tick_any()  # within idle_seconds: the hand-off only
    assert res.claimed == 2
    assert [(r.tenant_id, r.seq) for r in kit.launcher.launches] == [("noisy", 1), ("quiet", 1)]
