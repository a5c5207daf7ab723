"""The hand-off (issues 23, 29, 31): the rows the tail inserts for its own worker are born claimed
(``upsert_rows(rows, claim=...)``: no claim statement, no pick), and a tenant is materialized
only as far as that worker has room for -- on every backend. A born-claimed row is fenced like a
picked one (claim_id, lease, fenced marks); only the rows an insert wrote are its claims: a row
that existed keeps its state and its holder."""

from __future__ import annotations

import math
import random
from typing import Any

import msgspec
import pytest

from board_outbox.engine.work.worker import HANDOFF_BATCHES, PICK_IDLES, EffectWorker
from board_outbox.model import transitions as tr
from board_outbox.model.board import EventSnapshot
from board_outbox.model.errors import StoreUnavailable
from board_outbox.model.rows import EffectRow, new_launch_row
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import Claim, ClaimTerms, EffectOutbox
from tests.support.faults import Crash
from tests.support.kits import Kit, claim

pytestmark = pytest.mark.anyio

T = "t1"
SUB = Subscription(sub_id="s", tenant_id=T, bot="bot",
                   rule=MatchRule(event_types=("card.created",)))


def _row(seq: int, tenant: str = T, now: float = 100.0) -> EffectRow:
    ev = EventSnapshot(seq=seq, type="card.created", card_id=f"c{seq}")
    return new_launch_row(tenant, ev, Subscription(sub_id="s1", tenant_id=tenant, bot="b"), now)


def _terms(kit: Kit, lease: float = 30.0, claim_id: str = "c-1") -> ClaimTerms:
    return ClaimTerms(claim_id=claim_id, lease_until=kit.clock.now() + lease)


class PickSpy:
    """The outbox, counting the worker's due-row picks (``claim_any``); ``calls``: each pick's
    (limit, rows claimed)."""

    def __init__(self, outbox: EffectOutbox) -> None:
        self._outbox, self.picks = outbox, 0
        self.calls: list[tuple[int, int]] = []

    async def claim_any(self, now: float, lease_seconds: float, limit: int,
                        **kwargs: Any) -> Any:
        self.picks += 1
        got = await self._outbox.claim_any(now, lease_seconds, limit, **kwargs)
        self.calls.append((limit, len(got)))
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self._outbox, name)


def spied(worker: EffectWorker) -> PickSpy:
    spy = PickSpy(worker.outbox)
    worker.outbox = spy  # type: ignore[assignment]
    return spy


# --- the port -------------------------------------------------------------------------------


async def test_an_insert_returns_claims_only_for_the_rows_it_wrote(kit: Kit) -> None:
    await kit.outbox.upsert_rows([_row(1)])  # born pending: another replica's, say
    res = await kit.outbox.upsert_rows([_row(1), _row(2), _row(3)], claim=_terms(kit))
    assert (res.inserted, res.existing) == (2, 1)
    assert [c.row.seq for c in res.claims if c.row is not None] == [2, 3]
    assert len({repr(c.ref) for c in res.claims}) == 2
    # the row that existed keeps its state: pending, no claim
    assert (await kit.raw_row(_row(1).row_key) or {}).get("state") == "pending"
    without = await kit.outbox.upsert_rows([_row(4)])
    assert (without.inserted, without.claims) == (1, ())
    assert (await kit.raw_row(_row(4).row_key) or {}).get("state") == "pending"


async def test_a_born_claimed_row_is_held_like_a_picked_one(kit: Kit) -> None:
    terms = _terms(kit)
    res = await kit.outbox.upsert_rows([_row(1), _row(2)], claim=terms)
    now = kit.clock.now()
    for c in res.claims:  # the claim's row is the row as the store now holds it
        assert c.row is not None and not c.reclaimed
        assert (c.claim_id, c.lease_until) == (terms.claim_id, terms.lease_until)
        assert c.row == await kit.outbox.get(c.row.row_key)
        assert (c.row.state, c.row.claim_id, c.row.attempts) == ("claimed", terms.claim_id, 0)
    # held: neither a pick nor a reclaim takes them while the lease holds
    assert await claim(kit.outbox, T, now + 29.0, 30.0, 10) == []
    # fenced like any claim (M8): a mark under another claim_id is a no-op
    first, second = res.claims
    assert not await kit.outbox.apply_claimed(first.ref, "not-ours", tr.done(now=now, outcome="x"))
    assert await kit.outbox.apply_claimed(first.ref, first.claim_id, tr.done(now=now, outcome="ok"))
    # once the lease ends, a reclaim takes it and counts the attempt (M9), as for any claim
    (back,) = await claim(kit.outbox, T, now + 31.0, 30.0, 10)
    assert back.ref == second.ref and back.reclaimed and back.row is not None
    assert back.row.attempts == 1


async def test_two_replicas_inserting_the_same_rows_collapse_on_the_row_key(kit: Kit) -> None:
    a = await kit.outbox.upsert_rows([_row(1), _row(2)], claim=_terms(kit, claim_id="a"))
    b = await kit.outbox.upsert_rows([_row(2), _row(3)], claim=_terms(kit, claim_id="b"))
    assert [c.row.seq for c in a.claims if c.row] == [1, 2]
    assert [c.row.seq for c in b.claims if c.row] == [3]  # row 2 is a's: b does not run it
    assert (await kit.raw_row(_row(2).row_key) or {}).get("claim_id") == "a"
    assert len(await kit.rows(T)) == 3


async def test_apply_marks_moves_only_the_rows_its_claims_hold(kit: Kit) -> None:
    res = await kit.outbox.upsert_rows([_row(i) for i in range(1, 5)], claim=_terms(kit, claim_id="a"))
    c1, c2, c3, c4 = res.claims
    now = kit.clock.now()
    shared = tr.done(now=now, outcome="applied")  # one transition for two rows: a group
    marks = [tr.Mark(c1.ref, "a", shared), tr.Mark(c2.ref, "a", shared),
             tr.Mark(c3.ref, "a", tr.done(now=now, outcome="launched x")),
             tr.Mark(c4.ref, "stolen", tr.done(now=now, outcome="launched y"))]
    moved = await kit.outbox.apply_marks(marks)
    assert moved == [c1.ref, c2.ref, c3.ref]
    outcomes = {r.seq: (r.state, r.outcome) for r in await kit.rows(T)}
    assert outcomes == {1: ("done", "applied"), 2: ("done", "applied"),
                        3: ("done", "launched x"), 4: ("claimed", None)}
    # a retry of a write that landed finds its rows moved under its claim (counted, not lost)
    assert await kit.outbox.apply_marks(marks[:3]) == [c1.ref, c2.ref, c3.ref]
    assert await kit.outbox.apply_marks([]) == []


# --- the worker -----------------------------------------------------------------------------


async def materialize(kit: Kit, n: int, tenant: str = T, *,
                      worker: EffectWorker | None = None) -> list[Claim]:
    """``n`` events of ``tenant`` through a tail whose rows go to ``worker`` (born claimed);
    without a worker, the rows are born pending (another replica's tail, say)."""
    await kit.sub(msgspec.structs.replace(SUB, tenant_id=tenant, sub_id=f"{tenant}.s"))
    for i in range(1, n + 1):
        await kit.card(tenant, f"c{i}")
        await kit.emit(tenant, "card.created", f"c{i}")
    tail = kit.tail(seed="earliest")
    tail.handoff = worker
    results = await tail.drain_all([tenant])
    assert sum(r.rows_inserted for r in results) == n
    return [c for r in results for c in r.claims]


async def test_worker_runs_handed_rows_without_a_claim_or_a_pick(kit: Kit) -> None:
    worker = kit.worker(batch_size=8, idle_seconds=1.0)
    spy = spied(worker)
    worker.hand_off([])
    assert (await worker.tick_any()).claimed == 0 and spy.picks == 1  # the first tick picks
    handed = await materialize(kit, 3, worker=worker)
    assert len(handed) == 3 and worker.handed == 3
    assert {r.state for r in await kit.rows(T)} == {"claimed"}  # born claimed, for us
    res = await worker.tick_any()  # within idle_seconds of that pick: the hand-off only
    assert (res.claimed, res.done, spy.picks) == (3, 3, 1)
    assert sorted(r.seq for r in kit.launcher.launches) == [1, 2, 3]
    assert {r.state for r in await kit.rows(T)} == {"done"}
    assert kit.faults.hits["outbox.claim_any"] == 1  # no claim statement for the handed rows
    kit.clock.advance(PICK_IDLES * 1.0 - 0.01)
    assert (await worker.tick_any()).claimed == 0 and spy.picks == 1
    kit.clock.advance(0.01)
    assert (await worker.tick_any()).claimed == 0 and spy.picks == 2  # the pick's schedule


async def test_rows_not_handed_are_picked_on_the_pick_schedule(kit: Kit) -> None:
    """Another replica's tail wrote the rows (born pending): this worker, fed by its own tail,
    still finds them with its pick, at the latest ``PICK_IDLES * idle_seconds`` after its last
    one."""
    worker = kit.worker(batch_size=8, idle_seconds=1.0)
    worker.hand_off([])
    await worker.tick_any()
    await materialize(kit, 2)  # not handed to this worker
    assert (await worker.tick_any()).claimed == 0
    kit.clock.advance(PICK_IDLES * 1.0)
    assert (await worker.tick_any()).done == 2


async def test_a_handed_row_whose_lease_ran_out_runs_once(kit: Kit) -> None:
    """The worker holds handed rows past their lease (a stall): another worker reclaims them
    (the lost attempt counted) and runs them; the first skips them. Each row runs once."""
    a = kit.worker(batch_size=8, lease_seconds=30.0, heartbeat_fraction=0)
    handed = await materialize(kit, 3, worker=a)
    assert len(handed) == 3
    kit.clock.advance(31.0)
    b = kit.worker(batch_size=8, lease_seconds=30.0)
    assert (await b.tick_any()).done == 3
    res = await a.tick_any()
    assert res.done == 0 and res.skipped_expired == 3
    assert sorted(r.seq for r in kit.launcher.launches) == [1, 2, 3]
    assert {r.attempts for r in await kit.rows(T)} == {1}


async def test_the_hand_off_leaves_room_for_quiet_tenants_and_bounds_a_burst(kit: Kit) -> None:
    """A tenant with a claim's worth of rows waiting gets no room (its backlog waits in the
    event log); another tenant still does; the room never drops below a claim."""
    worker = kit.worker(batch_size=4)
    assert worker.room("noisy") >= 4 * HANDOFF_BATCHES
    await materialize(kit, 4, tenant="noisy", worker=worker)
    assert worker.handed == 4
    assert worker.room("noisy") == 0
    assert worker.room("quiet") >= 4
    worker.stopping = True
    assert worker.room("quiet") == 0 and worker.terms() is None  # a stopping worker takes none


async def test_a_tenant_the_worker_has_no_room_for_is_not_read(kit: Kit) -> None:
    """The tail asks the worker first: with no room for the tenant it reads nothing (no event
    read, no cursor move), and with room for k rows it reads about k rows' worth of events."""
    worker = kit.worker(batch_size=2)
    await materialize(kit, 2, tenant="t1", worker=worker)  # fills t1's share
    for i in range(3, 30):
        await kit.card(T, f"c{i}")
        await kit.emit(T, "card.created", f"c{i}")
    tail = kit.tail(seed="earliest")
    tail.handoff = worker
    reads = kit.faults.hits["events.read_after"]
    (res,) = await tail.drain_all([T], rounds=1)
    assert res.stopped == "no_room" and res.read == 0
    assert kit.faults.hits["events.read_after"] == reads
    await worker.tick_any()  # the worker runs them: room again
    room = worker.room(T)
    assert room >= 2
    (res,) = await tail.drain_all([T], rounds=1)
    assert 0 < res.read <= room and res.claims
    assert res.rows_inserted == res.read  # one launch row per event, all born claimed


async def test_a_failed_pick_after_taking_handed_rows_still_runs_them(kit: Kit) -> None:
    """The handed rows are taken, then the pick fails (a store blip): the handed rows run in
    this tick rather than wait out their lease; the next due pick tries again."""
    worker = kit.worker(batch_size=8, idle_seconds=1.0)
    spy = spied(worker)
    await materialize(kit, 3, worker=worker)
    kit.faults.fail_at("outbox.claim_any")
    res = await worker.tick_any()  # the first tick: the pick is due, and fails
    assert (res.claimed, res.done, spy.picks) == (3, 3, 1)
    assert {r.state for r in await kit.rows(T)} == {"done"}
    with pytest.raises(StoreUnavailable):  # nothing claimed: the failure is the tick's
        kit.faults.fail_at("outbox.claim_any")
        await worker.tick_any()


async def test_a_worker_that_dies_with_handed_rows_loses_only_their_lease(kit: Kit) -> None:
    """The insert wrote the rows born claimed, then the replica dies before running them: the
    lease holds them like any claim's; once it expires another worker reclaims them (the lost
    attempt counted, M9) and each runs once."""
    worker = kit.worker(batch_size=8, lease_seconds=30.0)
    tail = kit.tail(seed="earliest")
    tail.handoff = worker
    await kit.sub(SUB)
    for i in (1, 2):
        await kit.card(T, f"c{i}")
        await kit.emit(T, "card.created", f"c{i}")
    kit.faults.crash_at("outbox.upsert_rows.after")
    with pytest.raises(Crash):
        await tail.drain_all([T])
    assert {r.state for r in await kit.rows(T)} == {"claimed"}
    other = kit.worker(batch_size=8, lease_seconds=30.0)
    assert (await other.tick_any()).claimed == 0  # the lease holds
    kit.clock.advance(31.0)
    res = await other.tick_any()
    assert (res.claimed, res.done) == (2, 2)
    assert sorted(r.seq for r in kit.launcher.launches) == [1, 2]
    assert {r.attempts for r in await kit.rows(T)} == {1}


async def test_a_stopping_worker_gives_back_the_rows_it_never_started(kit: Kit) -> None:
    worker = kit.worker(batch_size=8)
    await materialize(kit, 3, worker=worker)
    worker.stopping = True
    assert await worker.release_queued() == 3 and worker.handed == 0
    rows = await kit.rows(T)
    assert {(r.state, r.attempts, r.claim_id) for r in rows} == {("pending", 0, None)}
    other = kit.worker(batch_size=8)
    assert (await other.tick_any()).done == 3  # at once, not after the lease


async def test_handed_rows_that_wait_keep_their_lease(kit: Kit) -> None:
    """Rows wait in the hand-off longer than their lease (a slow batch ahead of them): the
    worker extends their leases meanwhile (one write per claim they were born under), so no
    other worker reclaims them and no attempt is counted."""
    worker = kit.worker(batch_size=2, lease_seconds=30.0, heartbeat_fraction=0.34)
    handed = await materialize(kit, 6, worker=worker)
    assert len(handed) == 6
    other = kit.worker(batch_size=8, lease_seconds=30.0)
    for _ in range(6):  # 6 x 20 s: well past the first lease; at least a row a tick
        kit.clock.advance(20.0)
        await worker.tick_any()
        assert (await other.tick_any()).claimed == 0
    assert len(kit.launcher.launches) == 6 and worker.handed == 0
    assert {(r.state, r.attempts) for r in await kit.rows(T)} == {("done", 0)}


async def test_a_quiet_tenants_handed_row_is_not_queued_behind_a_burst(kit: Kit) -> None:
    """F1 in the hand-off too: a noisy tenant's rows fill it, then one quiet tenant's row
    arrives; the next claim takes the quiet row (round-robin by tenant), each tenant's rows in
    their order."""
    worker = kit.worker(batch_size=2, idle_seconds=1.0)
    worker.hand_off([])
    await worker.tick_any()  # the first tick's pick, before any row exists
    await materialize(kit, 6, tenant="noisy", worker=worker)
    await materialize(kit, 1, tenant="quiet", worker=worker)
    res = await worker.tick_any()  # within idle_seconds: the hand-off only
    assert res.claimed == 2
    assert [(r.tenant_id, r.seq) for r in kit.launcher.launches] == [("noisy", 1), ("quiet", 1)]


async def test_a_worker_fed_by_its_tail_picks_every_tick_while_its_picks_come_back_full(
    kit: Kit,
) -> None:
    """Generated backlogs: rows this worker was not handed (another replica's tail wrote them,
    or they are retries, stolen or released rows) beside rows it was handed, of several
    tenants, the clock moving a little or not at all between ticks. A worker fed by a hand-off
    picks on the schedule ``HandoffQueue.pick_due`` states: at its first tick, on every tick
    after a pick that came back full (a backlog), else once ``PICK_IDLES * idle_seconds`` have
    passed since the last; and a pick that runs gets at least half the claim. So a backlog
    drains a full claim a tick -- ``ceil(rows / batch) + 1`` ticks at most -- whether or not
    the clock moves."""
    rng = random.Random(32)
    idle = 1.0
    for n in range(20):
        batch = rng.randint(2, 8)
        worker = kit.worker(batch_size=batch, idle_seconds=idle)
        spy = spied(worker)
        tenants = [f"h{n}{c}" for c in "abcd"[:rng.randint(1, 4)]]
        now = kit.clock.now()
        rows = [_row(seq, rng.choice(tenants), now) for seq in range(1, rng.randint(2, 6 * batch))]
        cut = rng.randint(0, len(rows))  # the first ``cut`` rows: handed to this worker
        res = await kit.outbox.upsert_rows(rows[:cut], claim=worker.terms())
        await kit.outbox.upsert_rows(rows[cut:])  # born pending: not ours to hand
        worker.hand_off(res.claims)
        left, ticks, last_pick, full = len(rows), 0, -math.inf, False
        while left:
            kit.clock.advance(rng.choice([0.0, 0.0, 0.3, idle]))
            now = kit.clock.now()
            due = full or now >= last_pick + PICK_IDLES * idle
            picks = spy.picks
            res = await worker.tick_any()
            ticks += 1
            assert spy.picks - picks == int(due), (n, ticks, due, spy.calls)
            if due:
                want, got = spy.calls[-1]
                assert want >= batch // 2  # the handed rows leave the pick half the claim
                last_pick, full = now, got >= want
            left -= res.claimed
            assert res.claimed and ticks <= math.ceil(len(rows) / batch) + 1, (n, ticks, left)
        assert {r.state for t in tenants for r in await kit.rows(t)} == {"done"}


async def test_an_insert_adopts_the_rows_stored_under_its_own_or_adopted_claim_ids(
    kit: Kit,
) -> None:
    """A row stored claimed under the terms' claim id, or one they adopt, is the claimant's: an
    insert that meets it returns it with its claims (as stored: its claim id and lease); a row
    of another claimant, or one done, is not."""
    first = await kit.outbox.upsert_rows([_row(1), _row(2)], claim=_terms(kit, claim_id="old"))
    await kit.outbox.upsert_rows([_row(3)], claim=_terms(kit, claim_id="theirs"))
    done = next(c for c in first.claims if c.row is not None and c.row.seq == 2)
    assert await kit.outbox.apply_claimed(done.ref, "old", tr.done(now=kit.clock.now(),
                                                                   outcome="ok"))
    kit.clock.advance(5.0)
    terms = ClaimTerms(claim_id="new", lease_until=kit.clock.now() + 30.0, adopt=("old",))
    res = await kit.outbox.upsert_rows([_row(1), _row(2), _row(3), _row(4)], claim=terms)
    assert (res.inserted, res.existing) == (1, 3)
    got = {c.row.seq: (c.claim_id, c.lease_until) for c in res.claims if c.row is not None}
    # row 1 as stored (its claim id and lease, not the new terms'); row 4 under the new terms
    assert got == {1: ("old", first.claims[0].lease_until), 4: ("new", terms.lease_until)}
    plain = await kit.outbox.upsert_rows([_row(1)], claim=_terms(kit, claim_id="other"))
    assert plain.claims == ()  # not ours


async def test_rows_an_insert_wrote_after_its_caller_gave_up_run_now_and_once(kit: Kit) -> None:
    """The store wrote an insert's rows but its answer was lost (a timeout after the write):
    the tail's batch aborts, its cursor untouched, and the rows sit claimed under the worker's
    terms, unknown to it. The next drain inserts them again and they come back adopted: they
    run now, once -- not after their lease. So again after the terms' claim id has moved on."""
    worker = kit.worker(batch_size=8)
    tail = kit.tail(seed="earliest")
    tail.handoff = worker
    await kit.sub(SUB)
    for i in range(1, 4):
        await kit.card(T, f"c{i}")
        await kit.emit(T, "card.created", f"c{i}")
    kit.faults.fail_at("outbox.upsert_rows.after")
    res = await tail.drain_tenant(T)
    assert res.stopped == "aborted" and worker.handed == 0 and await kit.cursors.get(T) == 0
    assert {r.state for r in await kit.rows(T)} == {"claimed"}  # stored, and nobody knows
    res = await tail.drain_tenant(T)
    assert res.stopped != "aborted" and worker.handed == 3 and res.rows_inserted == 0
    assert (await worker.tick_any()).done == 3
    # the same, across a new claim id: the lost insert's id is adopted
    for i in range(4, 6):
        await kit.card(T, f"c{i}")
        await kit.emit(T, "card.created", f"c{i}")
    kit.faults.fail_at("outbox.upsert_rows.after")
    assert (await tail.drain_tenant(T)).stopped == "aborted"
    kit.clock.advance(worker.settings.lease_seconds * 0.5)  # past the terms' share, in the lease
    await tail.drain_tenant(T)
    assert worker.handed == 2
    res = await worker.tick_any()
    assert res.done == 2 and res.skipped_expired == 0
    assert sorted(r.seq for r in kit.launcher.launches) == [1, 2, 3, 4, 5]  # each once


async def test_with_the_stream_open_the_idle_pick_is_the_net_and_its_own_retries_run_when_due(
    kit: Kit,
) -> None:
    """While the change stream is open the owned tenants' new rows reach the worker by hand, so
    its idle pick is only the net: it runs every ``net_pick_seconds``, not every ``PICK_IDLES *
    idle_seconds``; a retry this worker wrote itself is picked when it is due, not at the next
    net."""
    worker = kit.worker(batch_size=8, idle_seconds=0.25, net_pick_seconds=5.0,
                        backoff={"base_seconds": 1.0, "jitter": 0.0})
    worker.stream_open = lambda: True
    spy = spied(worker)
    assert (await worker.tick_any()).claimed == 0 and spy.picks == 1  # the first tick picks
    for _ in range(4):  # the old schedule would pick every PICK_IDLES * 0.25 = 1 s
        kit.clock.advance(1.0)
        await worker.tick_any()
    assert spy.picks == 1
    kit.clock.advance(1.0)
    await worker.tick_any()
    assert spy.picks == 2  # the net, 5 s on
    kit.faults.fail_at("launcher.launch")
    await materialize(kit, 1, worker=worker)
    assert (await worker.tick_any()).retried == 1  # pending again, due in 1 s
    picks = spy.picks
    kit.clock.advance(0.99)
    assert (await worker.tick_any()).claimed == 0 and spy.picks == picks
    kit.clock.advance(0.01)
    res = await worker.tick_any()  # due now: picked, 4 s before the next net
    assert res.done == 1 and spy.picks == picks + 1
    assert [r.seq for r in kit.launcher.launches] == [1]
