"""The edges of the worker's neighbours, each one rule a small edit would break: the hand-off
never runs a row whose lease it lost while it waited, and sizes its room by what it already
holds; an insert error that is not a duplicate key stops the tenant's cursor (Mongo); the
stream's buffer earns no trust from a read that filled its limit; the first of two failing
lanes is the error raised; a pause release that fails is tried again at the next read;
a row is never coalesced into a newer row that is still running; priority orders a tenant's
own rows, never one tenant's ahead of another's turn. On every backend where a store is
involved (memory, mongomock, the wire)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pymongo.errors import BulkWriteError

from board_outbox.engine.handlers.coalesce import coalesce_check
from board_outbox.engine.tail.prefetch import StreamEvents
from board_outbox.engine.work.lanes import run_lanes
from board_outbox.model import transitions as tr
from board_outbox.model.board import EventSnapshot
from board_outbox.model.errors import CoalesceHold, Superseded
from board_outbox.model.fairness import prioritized
from board_outbox.model.rows import EffectRow, new_subscription_row
from board_outbox.model.subscriptions import Subscription
from tests.contract.test_coalesce import _sub
from tests.contract.test_handoff import materialize as handed_rows
from tests.contract.test_pauses import EVERY as PAUSE_EVERY
from tests.contract.test_pauses import _drain, _gate, _held, _pauses, _rows, _worker
from tests.support.kits import Kit, memory_kit

pytestmark = pytest.mark.anyio

T = "t1"


# --- the hand-off --------------------------------------------------------------------------------


async def test_a_handed_row_whose_lease_was_lost_while_it_waited_is_never_run(kit: Kit) -> None:
    """Two rows wait in the hand-off; meanwhile the second is given back and another worker
    claims it (say, an operator's release). The heartbeat's next beat finds that lease lost:
    the next tick runs only the first row -- the second is the other worker's to run, once."""
    worker = kit.worker(batch_size=8, lease_seconds=30.0, heartbeat_fraction=0.34)
    _first, second = await handed_rows(kit, 2, worker=worker)
    assert await kit.outbox.apply_claimed(second.ref, second.claim_id,
                                          tr.release(now=kit.clock.now()))
    other = kit.worker(batch_size=8, lease_seconds=30.0, heartbeat_fraction=0)
    assert len(await other.outbox.claim_any(kit.clock.now(), 30.0, 10, tenants=[T])) == 1
    kit.clock.advance(25.0)  # within two beats of the end: the beat extends both
    await worker.extend_many(worker.leases)  # the heartbeat's beat, as during a batch
    res = await worker.tick_any()
    assert (res.claimed, res.done) == (1, 1)
    assert [r.seq for r in kit.launcher.launches] == [1]
    rows = {r.seq: (r.state, r.claim_id) for r in await kit.rows(T)}
    assert rows[1][0] == "done" and rows[2][0] == "claimed" and rows[2][1] != second.claim_id


async def test_the_hand_off_room_counts_the_rows_already_waiting(kit: Kit) -> None:
    """The worker holds at most ``capacity`` rows, in flight and waiting: with a tenant's rows
    already queued, another tenant gets only the room left (at least a claim's worth)."""
    worker = kit.worker(batch_size=2, lease_seconds=30.0, heartbeat_fraction=0)
    cap = worker.capacity()
    assert worker.room("b") == cap
    for tenant in ("a", "c", "d"):
        await handed_rows(kit, 2, tenant, worker=worker)
    assert worker.handed == 6
    assert worker.room("b") == max(2, cap - 6)


# --- the insert (Mongo) -------------------------------------------------------------------------


class RefusingOne:
    """The outbox's collection, refusing the second document of each insert with a write error
    that is not a duplicate key (a document the server's validation refuses)."""

    def __init__(self, coll: Any) -> None:
        self._coll, self.refused = coll, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._coll, name)

    async def insert_many(self, docs: list[dict[str, Any]], ordered: bool = True) -> Any:
        if len(docs) < 2:
            return await self._coll.insert_many(docs, ordered=ordered)
        self.refused += 1
        await self._coll.insert_many([d for i, d in enumerate(docs) if i != 1], ordered=ordered)
        raise BulkWriteError({"writeErrors": [{"index": 1, "code": 121,
                                               "errmsg": "Document failed validation"}],
                              "writeConcernErrors": [], "nInserted": len(docs) - 1})


async def test_an_insert_error_that_is_not_a_duplicate_key_stops_the_cursor(mongo: Kit) -> None:
    """The store refuses one row of the tail's insert, and not because it exists: the tenant
    stalls with its cursor where it was (the row would be lost for good past it); once the
    store takes it, the next drain writes it."""
    kit = mongo
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="b"))
    for i in range(3):
        await kit.card(T, f"c{i}")
        await kit.emit(T, "card.created", f"c{i}")
    outbox = kit.outbox._target  # type: ignore[attr-defined]  # the adapter under the proxy
    plain = outbox.coll
    outbox.coll = refusing = RefusingOne(plain)
    tail = kit.tail(seed="earliest")
    res = await tail.drain_tenant(T)
    assert refusing.refused == 1 and res.stopped == "stalled"
    assert await kit.cursors.get(T) == 0
    outbox.coll = plain
    await tail.drain_all([T])
    assert await kit.cursors.get(T) == 3
    assert sorted(r.seq for r in await kit.rows(T)) == [1, 2, 3]


# --- the stream's buffer ------------------------------------------------------------------------


async def test_a_read_that_filled_its_limit_earns_the_buffer_no_trust() -> None:
    """Five events wait; the tail reads two (its limit), so more may be right behind: the
    buffer is not trusted (trusted, it would serve the one later event the stream delivered
    as a short batch and end the drain with events 4 and 5 unread)."""
    kit = memory_kit()
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await kit.card(T, "c")
    for _ in range(5):
        await kit.emit(T, "card.created", "c")
    tail = kit.tail(seed="earliest", batch_size=2)
    tail.streamed = buf = StreamEvents()
    res = await tail.drain_tenant(T)
    assert res.read == 2 and not buf.trusted(T)
    buf.offer(T, 3, {"tenant_id": T, "seq": 3, "type": "card.created", "card_id": "c",
                     "at": kit.clock.now()})
    await tail.drain_all([T])
    assert sorted(r.seq for r in await kit.rows(T)) == [1, 2, 3, 4, 5]


# --- lanes --------------------------------------------------------------------------------------


async def test_of_two_failing_lanes_the_first_failure_is_raised() -> None:
    """Lane a fails, then lane b (still running) fails too: the error raised is a's, the first
    (the one the batch stopped for)."""
    first_failed = anyio.Event()

    async def run(unit: str) -> None:
        if unit == "a1":
            first_failed.set()
            raise RuntimeError("a1 failed first")
        if unit == "b1":
            await first_failed.wait()
            raise RuntimeError("b1 failed second")

    with anyio.fail_after(5), pytest.raises(RuntimeError, match="a1 failed first"):
        await run_lanes(["b1", "a1"], lambda u: u[0], run, concurrency=2,
                        stopping=lambda: False)


# --- pauses -------------------------------------------------------------------------------------


async def test_a_pause_release_that_fails_is_tried_again_at_the_next_read(kit: Kit) -> None:
    """The tenant's pause is lifted; the release of its held rows fails at both reads that
    release after a lift. The next read (one heartbeat later) tries again and releases them --
    not the sweep, a minute on."""
    await _rows(kit, Subscription(sub_id="s1", tenant_id="t1", bot="b"), 2)
    gate = _gate(kit)
    await _pauses(kit).pause("tenant", "t1", reason="", by="ana", at=kit.clock.now())
    await gate.refresh()
    assert (await _drain(_worker(kit, gate))).held == 2
    await _pauses(kit).resume("tenant", "t1", by="ana", at=kit.clock.now())
    kit.faults.fail_at("outbox.release_held", times=2)
    for _ in range(2):
        kit.clock.advance(PAUSE_EVERY)
        assert await gate.refresh()
    assert kit.faults.fired["outbox.release_held"] == 2
    assert len(_held(await kit.rows("t1"))) == 2
    kit.clock.advance(PAUSE_EVERY)
    assert await gate.refresh()
    assert _held(await kit.rows("t1")) == []


# --- coalescing ---------------------------------------------------------------------------------


async def test_a_row_is_never_coalesced_into_a_newer_row_that_is_still_running(kit: Kit) -> None:
    """Past the burst's deadline row 3 was chosen (its burst closed) and is running now. Row 2
    must wait for it: superseded by a row whose run may still fail, its edit would be lost."""
    sub = _sub(quiet=1.0, max_wait=10.0)
    window = sub.coalesce
    assert window is not None
    t0 = kit.clock.now()

    def row(i: int) -> EffectRow:
        return new_subscription_row(T, EventSnapshot(seq=i, type="card.updated", card_id="c1"),
                                    sub, t0 + i)

    rows = [row(i) for i in (1, 2, 3)]
    await kit.outbox.upsert_rows(rows)
    now = t0 + 20.0
    with pytest.raises(Superseded):
        await coalesce_check(rows[0], window, kit.outbox, now)  # row 3 chosen, burst closed
    claimed = await kit.outbox.claim_any(now, 30.0, 10, tenants=[T])
    assert rows[2].row_key in {c.row.row_key for c in claimed if c.row}  # row 3 runs
    with pytest.raises(CoalesceHold):
        await coalesce_check(rows[1], window, kit.outbox, now)


# --- priority -----------------------------------------------------------------------------------


def test_priority_orders_a_tenants_own_rows_and_never_one_tenant_ahead_of_anothers_turn() -> None:
    """Tenant a's turn comes first (its row is first in the claim): its own higher-priority
    row goes first within that turn, but tenant b's priority-5 row does not jump a's turn."""
    items = [("a", 0, 1), ("b", 5, 1), ("a", 3, 2)]
    assert prioritized(items, lambda r: r[0], lambda r: r[1]) == [
        ("a", 3, 2), ("b", 5, 1), ("a", 0, 1)]


# --- bulk replay --------------------------------------------------------------------------------


async def _dead_letters(kit: Kit, n: int, at: float) -> None:
    from tests.contract.test_bulk_replay import SUBS, _dead

    for s in SUBS:
        await kit.subs.put(s)
    await kit.outbox.upsert_rows([_dead("t1", i, at) for i in range(1, n + 1)])


async def _replay(kit: Kit, plan: Any, rate: float) -> Any:
    from board_outbox.engine.upkeep.bulk_replay import apply_bulk_replay

    async def sleep(seconds: float) -> None:
        kit.clock.advance(seconds)

    return await apply_bulk_replay(kit.outbox, kit.subs, plan, bulk_id="b1", by="ops",
                                   clock=kit.clock, rate=rate, sleep=sleep, page=2)


async def test_a_bulk_replay_applies_no_more_rows_than_its_plan_counted(kit: Kit) -> None:
    """Five dead-letters parked at one instant; the plan's limit is three. The apply walks up
    to the plan's newest instant -- where all five lie -- and still replays three."""
    from board_outbox.engine.upkeep.bulk_replay import plan_bulk_replay
    from board_outbox.model.dead_letters import BulkFilter

    await _dead_letters(kit, 5, kit.clock.now() - 60)
    plan = await plan_bulk_replay(kit.outbox, kit.subs, BulkFilter(limit=3), clock=kit.clock,
                                  page=2)
    assert (plan.matched, plan.truncated) == (3, True)
    prog = await _replay(kit, plan, rate=1000.0)
    assert prog.replayed == 3
    assert sorted(r.state for r in await kit.rows("t1")) == ["failed"] * 2 + ["pending"] * 3


async def test_a_bulk_replay_does_not_catch_up_after_a_slow_page(kit: Kit) -> None:
    """Rate 2 a second; the second page's read takes 5 s. The writes after it do not burst to
    make up for the lost time: no two closer than half a second, any second holding at most
    three."""
    import itertools

    from board_outbox.engine.upkeep.bulk_replay import plan_bulk_replay
    from board_outbox.model.dead_letters import BulkFilter

    await _dead_letters(kit, 6, kit.clock.now() - 60)
    plan = await plan_bulk_replay(kit.outbox, kit.subs, BulkFilter(), clock=kit.clock, page=2)
    assert plan.matched == 6
    pages = 0
    times: list[float] = []
    read, write = kit.outbox.failed_page, kit.outbox.apply_failed

    async def slow_second_page(*a: Any, **kw: Any) -> Any:
        nonlocal pages
        pages += 1
        if pages == 2:
            kit.clock.advance(5.0)
        return await read(*a, **kw)

    async def timed(*a: Any, **kw: Any) -> Any:
        times.append(kit.clock.now())
        return await write(*a, **kw)

    kit.outbox.failed_page = slow_second_page  # type: ignore[method-assign]
    kit.outbox.apply_failed = timed  # type: ignore[method-assign]
    prog = await _replay(kit, plan, rate=2.0)
    assert prog.replayed == 6 and pages >= 2
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.5 - 1e-9
    for t in times:
        assert sum(1 for u in times if t <= u < t + 1.0) <= 3
