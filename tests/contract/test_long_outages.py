"""Outages longer than the original lease, on every backend (memory, mongomock, the wire): what
the heartbeat keeps alive must be what the rest of the worker relies on.

- A flush riding out a store outage keeps trying until the lease *as the heartbeat extended
  it* ends, not the lease the row was claimed with; a staged row (launched, or applied in a
  projection unit) keeps its heartbeat until its flush says what became of it.
- A row handed to the worker keeps its lease while it waits: the batch's heartbeat extends it
  while another row runs long, and between batches one failed beat is ridden out (the
  hand-off extends every lease that ends within two beats).
- What rides on a lease (a launch's in-flight slots) is renewed only while the lease holds.

The kit's clock is manual: a test moves it where the store would see time pass, and beats
where the heartbeat would (``EffectWorker.extend_many``, what its heartbeat calls), or lets the
real-time heartbeat beat between short real sleeps (``BEAT``)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from board_outbox.engine.handlers.registry import ExecutionContext
from board_outbox.engine.work.worker import EffectWorker
from board_outbox.model.errors import StoreUnavailable
from board_outbox.model.rows import EffectRow
from tests.contract.test_completion import materialize, paced, spy_marks
from tests.contract.test_handoff import materialize as handed_rows
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

T = "t1"
LEASE = 10.0
BEAT = 0.005  # the real-time heartbeat every 0.05 s (a lease of 10 s): several per store second
BOUND = 15.0  # seconds: each test's own bound, far inside the suite's per-test timeout


async def projection_rows(kit: Kit) -> None:
    """Two tenants' board-reflect rows: one unit across tenants (``BatchUnit``)."""
    for t in ("a", "b"):
        await kit.card(t, "c1")
        for _ in range(2):
            await kit.emit(t, "card.updated", "c1")
    await kit.tail(seed="earliest", projections=("board-reflect",)).drain_all(["a", "b"])


@pytest.mark.parametrize("rows", ["launch", "projection"])
async def test_a_flush_rides_out_an_outage_past_the_original_lease_while_the_heartbeat_holds(
        kit: Kit, rows: str) -> None:
    """The effects ran; their marks' bulk write fails for 20 s of store time, twice the lease
    the rows were claimed with. The heartbeat keeps beating meanwhile (every 3 s), so the lease
    holds and the flush keeps trying: every row is done, none is left to run again. (Giving up
    at the original lease, or dropping a staged row from the heartbeat, would leave them
    claimed, for another worker to run again.)"""
    if rows == "launch":
        await materialize(kit, 3)
        worker = kit.worker(batch_size=10, lease_seconds=LEASE, heartbeat_fraction=0)
    else:
        await projection_rows(kit)
        worker = kit.worker(registry=kit.registry(["board-reflect"]), batch_size=10,
                            lease_seconds=LEASE, heartbeat_fraction=0)
    paced(kit, worker)
    start = kit.clock.now()
    beats: list[float] = []
    tries: list[float] = []

    async def outage(_marks: list[Any]) -> None:
        now = kit.clock.now()
        tries.append(now)
        if now >= start + 3.0 * (len(beats) + 1):  # the heartbeat's turn: every 3 s
            beats.append(now)
            await worker.extend_many(list(worker.inflight.values()))
        if now < start + 2 * LEASE:
            raise StoreUnavailable("down")

    spy_marks(worker, outage)
    with anyio.fail_after(BOUND):
        res = await worker.tick_any()
    n = 3 if rows == "launch" else 4
    assert (res.claimed, res.done, res.unrecorded, res.lease_lost) == (n, n, 0, 0)
    assert max(tries) >= start + 2 * LEASE and len(beats) >= 6
    assert {(r.state, r.attempts) for r in await kit.rows()} == {("done", 0)}
    assert worker.inflight == {}


class SlowFirst:
    """The launch handler: the first launch runs ``seconds`` of store time, a second at a time
    between short real sleeps (the real-time heartbeat beats meanwhile); halfway through, a
    rival worker ticks. The other launches are instant."""

    def __init__(self, kit: Kit, seconds: int, rival: EffectWorker) -> None:
        self.kit, self.seconds, self.rival = kit, seconds, rival
        self.rival_claimed: int | None = None
        self.runs: list[int] = []

    async def execute(self, row: EffectRow, ctx: ExecutionContext[Any]) -> str:
        self.runs.append(row.seq)
        if len(self.runs) == 1:
            for step in range(self.seconds):
                self.kit.clock.advance(1.0)
                await anyio.sleep(0.03)  # several beats
                if step == self.seconds // 2:
                    self.rival_claimed = (await self.rival.tick_any()).claimed
        return "launched"


async def test_handed_rows_keep_their_leases_while_a_long_effect_runs_ahead_of_them(
        kit: Kit) -> None:
    """Three rows handed to the worker (born claimed, leased 10 s); it takes one a tick, and
    that one runs 24 s. The batch's heartbeat extends the waiting rows' leases too: the rival
    ticking at 12 s reclaims none of them, and each row runs once, its attempt never counted."""
    registry = kit.registry()
    rival = kit.worker(registry=registry, lease_seconds=LEASE, heartbeat_fraction=0)
    worker = kit.worker(registry=registry, batch_size=1, lease_seconds=LEASE,
                        heartbeat_fraction=BEAT)
    effect = SlowFirst(kit, 24, rival)
    registry.register("launch", effect, replace=True)
    handed = await handed_rows(kit, 3, worker=worker)
    assert len(handed) == 3 and worker.handed == 3
    with anyio.fail_after(BOUND):
        res = await worker.tick_any()
        assert (res.claimed, res.done) == (1, 1) and worker.handed == 2
        assert effect.rival_claimed == 0
        for _ in range(2):
            assert (await worker.tick_any()).done == 1
    assert sorted(effect.runs) == [1, 2, 3]
    assert {(r.state, r.attempts) for r in await kit.rows(T)} == {("done", 0)}


async def test_a_failed_beat_between_batches_is_ridden_out_by_the_handed_rows(kit: Kit) -> None:
    """Handed rows wait (the worker's ticks are for another tenant); between batches their
    leases are beaten every ``lease * heartbeat_fraction`` (30 s * 0.34). The beat at 20.4 s
    fails: the row's lease, extended at 10.2 s (two beats ahead), still holds at the next beat,
    which extends it. No rival reclaims a row, and none counts an attempt."""
    worker = kit.worker(batch_size=8, lease_seconds=30.0, heartbeat_fraction=0.34)
    handed = await handed_rows(kit, 3, worker=worker)
    assert len(handed) == 3
    rival = kit.worker(batch_size=8, lease_seconds=30.0, heartbeat_fraction=0)
    beat = 30.0 * 0.34
    for step in range(6):
        # a rival's sweep first: a lapsed lease is anyone's, before its holder beats again
        assert (await rival.tick_any()).claimed == 0, f"a handed row's lease lapsed by {step}"
        if step == 2:  # the beat at 20.4 s fails (its one write)
            kit.faults.fail_at("outbox.apply_claimed_many[extend_lease]")
        await worker.tick_any(tenants=["someone else"])
        kit.clock.advance(beat)
    assert kit.faults.fired["outbox.apply_claimed_many[extend_lease]"] == 1
    done = [(await worker.tick_any()).done for _ in range(3)]  # a tick takes some of them
    assert sum(done) == 3 and worker.handed == 0
    assert {(r.state, r.attempts) for r in await kit.rows(T)} == {("done", 0)}


async def test_a_row_leaves_the_heartbeat_once_its_mark_is_written(kit: Kit) -> None:
    """Row 1 is launched and its mark written by the flush timer while row 2 still runs: from
    then on the heartbeat holds row 2's lease only (beating a done row is a write for nothing,
    and a fenced no-op that reads as a lost lease)."""
    await materialize(kit, 2)
    registry = kit.registry()
    worker = kit.worker(registry=registry, batch_size=10, lease_seconds=LEASE,
                        heartbeat_fraction=BEAT, mark_flush_seconds=0.01)
    held: list[list[int]] = []

    class Second:
        async def execute(self, row: EffectRow, ctx: ExecutionContext[Any]) -> str:
            if row.seq == 2:
                for _ in range(10):  # the timer flushes row 1's mark meanwhile
                    kit.clock.advance(1.0)
                    await anyio.sleep(0.03)
                held.append(sorted(x.claim.row.seq for x in worker.inflight.values()
                                   if x.claim.row is not None))
            return "launched"

    registry.register("launch", Second(), replace=True)
    with anyio.fail_after(BOUND):
        res = await worker.tick_any()
    assert res.done == 2 and held == [[2]]
    assert worker.inflight == {}


async def test_a_launch_whose_lease_was_lost_stops_renewing_its_slots(kit: Kit) -> None:
    """A launch holds its in-flight slots (10 s, renewed by each beat of its lease). Its lease
    is taken meanwhile (released and claimed by another worker): the next beat finds it lost,
    and renews nothing that rode on it -- the slots end at their own end, so the row's new
    holder can launch, and the old launch's late mark is fenced out."""
    from board_outbox.model import transitions as tr
    from board_outbox.model.limits import bot_key
    from tests.contract.test_slot_lifetime import _beat, _limits, _running

    worker, launcher = await _running(kit, slot_seconds=10)
    lim = _limits(kit)
    other = kit.worker(heartbeat_fraction=0, lease_seconds=30)
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.tick_any, [T])
            await launcher.started.wait()
            (lease,) = worker.inflight.values()
            c = lease.claim
            assert await kit.outbox.apply_claimed(c.ref, c.claim_id,
                                                  tr.release(now=kit.clock.now()))
            assert len(await other.outbox.claim_any(kit.clock.now(), 30.0, 1, tenants=[T])) == 1
            kit.clock.advance(8)
            await _beat(worker)
            assert lease.stopped == "lost"
            kit.clock.advance(3)  # past the slot's own end (10 s): not renewed at the lost beat
            now = kit.clock.now()
            assert await lim.acquire(bot_key(T, "b"), 1, "the new holder", until=now + 60,
                                     now=now)
            launcher.done.set()
    [row] = await kit.rows(T)
    assert row.state == "claimed" and row.claim_id != c.claim_id  # the new holder's, untouched


async def test_a_beat_cut_short_by_the_store_has_extended_the_leases_nearest_their_end(
        kit: Kit) -> None:
    """Two claims' leases, one ending in 10 s and one in 25 s, beaten together; the store
    times out on the beat's second write (the rest waits for the next beat). The first write
    went to the lease nearest its end: that one was extended, the other still has time."""
    from board_outbox.engine.flow.leases import Lease

    await materialize(kit, 2)
    now = kit.clock.now()
    (near,) = await kit.outbox.claim_any(now, 10.0, 1, tenants=[T])
    (far,) = await kit.outbox.claim_any(now, 25.0, 1, tenants=[T])
    worker = kit.worker(lease_seconds=30.0, heartbeat_fraction=0)
    leases = [Lease(far, now), Lease(near, now)]
    kit.clock.advance(5.0)
    kit.faults.fail_at("outbox.apply_claimed[extend_lease]", nth=2)
    await worker.extend_many(leases)
    assert kit.faults.fired["outbox.apply_claimed[extend_lease]"] == 1
    assert (leases[1].until, leases[0].until) == (now + 35.0, far.lease_until)
    assert [x.stopped for x in leases] == ["", ""]
