"""Bulk replay of dead-letters by filter, as a plan (issue 33 item 5), on every backend: the plan's
counts and filters (a dry run that writes nothing), the walk over many rows parked at one
instant, the apply (each row a fenced, audited replay), a row changed between the plan and the
apply or under the apply's feet, an abort or a crash midway leaving every row replayed or
untouched, a write the store does not answer, and the rate honoured on an injected clock."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import anyio
import msgspec
import pytest
from anyio.lowlevel import checkpoint

from board_outbox.engine.upkeep.bulk_replay import Stop, apply_bulk_replay, plan_bulk_replay
from board_outbox.model import transitions as tr
from board_outbox.model.board import EventSnapshot
from board_outbox.model.dead_letters import BulkFilter, BulkPlan, BulkProgress, last_error_class
from board_outbox.model.rows import EffectRow, ErrorEntry, new_launch_row, new_projection_row
from board_outbox.model.subscriptions import Subscription
from tests.support.faults import Crash
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

SUBS = (Subscription(sub_id="s1", tenant_id="t1", bot="b1"),
        Subscription(sub_id="s2", tenant_id="t1", bot="b2"),
        Subscription(sub_id="s3", tenant_id="t2", bot="b1"))
LEASE = "lease expired before the attempt finished"
WRITES = ("upsert_rows", "apply_failed", "apply_claimed", "apply_claimed_many", "apply_marks",
          "park_broken", "purge", "claim_any", "reclaim_expired")


def _dead(tenant: str, seq: int, at: float, *, sub: str | None = "s1", kind: str = "launch",
          error: str = "LaunchFailed: bot runner answered 503", error_kind: str = "error",
          state: str = "failed") -> EffectRow:
    ev = EventSnapshot(seq=seq, type="card.created", card_id=f"c{seq}", at=at)
    if sub is None:
        row = new_projection_row(tenant, ev, "board-reflect", at - 5)
    else:
        s = next(s for s in SUBS if s.sub_id == sub)
        row = new_launch_row(tenant, ev, s, at - 5)
        row.kind = kind
    row.state = state  # type: ignore[assignment]
    row.attempts = 3
    row.errors = [ErrorEntry(attempt=1, at=at - 2, error="TimeoutError: first try"),
                  ErrorEntry(attempt=3, at=at, error=error, kind=error_kind)]
    row.updated_at = at
    return row


async def _plant(kit: Kit) -> float:
    """12 dead-letters over 2 tenants, 3 subscriptions, 3 kinds and 4 error classes, plus a
    pending and a done row that no filter may take. Returns the base time."""
    for s in SUBS:
        await kit.subs.put(s)
    base = kit.clock.now() - 3600
    rows = [_dead("t1", i, base + i) for i in range(1, 5)]  # s1 (b1), LaunchFailed
    rows += [_dead("t1", i, base + i, sub="s2", error="TimeoutError: bot took 30 s")
             for i in (10, 11)]
    rows += [_dead("t2", i, base + i, sub="s3", error=LEASE, error_kind="lease_expired")
             for i in (20, 21, 22)]
    rows += [_dead("t1", i, base + i, sub=None, error="ProjectionFailed: boom") for i in (30, 31)]
    rows += [_dead("t2", 40, base + 40, sub="s3", kind="notify", error="HTTPError: 410 Gone")]
    rows += [_dead("t1", 50, base + 50, state="pending"), _dead("t1", 51, base + 51, state="done")]
    await kit.outbox.upsert_rows(rows)
    return base


async def _plan(kit: Kit, **flt: Any) -> BulkPlan:
    return await plan_bulk_replay(kit.outbox, kit.subs, BulkFilter(**flt), clock=kit.clock, page=3)


async def _raw(kit: Kit) -> dict[str, dict[str, Any]]:
    rows = await kit.rows()
    out = {}
    for r in rows:
        doc = await kit.raw_row(r.row_key)
        assert doc is not None
        out[r.row_key] = copy.deepcopy({k: v for k, v in doc.items() if k != "_id"})
    return out


async def test_the_plan_counts_by_tenant_kind_and_subscription_and_writes_nothing(kit: Kit) -> None:
    base = await _plant(kit)
    before = await _raw(kit)
    kit.faults.hits.clear()
    plan = await _plan(kit)
    assert plan.matched == 12 and not plan.truncated and plan.unreadable == 0
    assert plan.by_tenant == {"t1": 8, "t2": 4}
    assert plan.by_kind == {"launch": 9, "projection": 2, "notify": 1}
    assert plan.by_subscription == {"s1": 4, "s2": 2, "s3": 4, "projection board-reflect": 2}
    assert (plan.oldest, plan.newest) == (base + 1, base + 40)
    assert await _raw(kit) == before  # the dry run wrote nothing ...
    assert not any(kit.faults.hits[f"outbox.{w}"] for w in WRITES)  # ... nor tried to
    assert kit.faults.hits["outbox.failed_page"] == 5  # 12 failed rows, 3 a page: 4 full + 1


@pytest.mark.parametrize(("flt", "matched"), [
    ({"tenant": "t2"}, {"t2/20/sub/s3", "t2/21/sub/s3", "t2/22/sub/s3", "t2/40/sub/s3"}),
    ({"kind": "launch", "tenant": "t1"}, {f"t1/{i}/sub/s1" for i in range(1, 5)}
     | {"t1/10/sub/s2", "t1/11/sub/s2"}),
    ({"kind": "projection"}, {"t1/30/proj/board-reflect", "t1/31/proj/board-reflect"}),
    ({"subscription": "s2"}, {"t1/10/sub/s2", "t1/11/sub/s2"}),
    ({"bot": "b1", "kind": "launch"}, {f"t1/{i}/sub/s1" for i in range(1, 5)}
     | {"t2/20/sub/s3", "t2/21/sub/s3", "t2/22/sub/s3"}),
    ({"error": "BOT RUNNER"}, {f"t1/{i}/sub/s1" for i in range(1, 5)}),  # any case
    ({"error": "first try"}, set()),  # the last error only
    ({"error_class": "TimeoutError"}, {"t1/10/sub/s2", "t1/11/sub/s2"}),
    ({"error_class": "lease_expired"}, {"t2/20/sub/s3", "t2/21/sub/s3", "t2/22/sub/s3"}),
    ({"limit": 2}, {"t1/1/sub/s1", "t1/2/sub/s1"}),  # the oldest parked first
])
async def test_each_filter_takes_its_rows(kit: Kit, flt: dict[str, Any], matched: set[str]) -> None:
    await _plant(kit)
    plan = await _plan(kit, **flt)
    assert plan.matched == len(matched)
    assert plan.truncated == ("limit" in flt)
    prog = await _apply(kit, plan)
    assert prog.replayed == len(matched) and prog.state == "done"
    replayed = {r.row_key for r in await kit.rows() if r.state == "pending" and r.audit}
    assert replayed == matched


async def test_a_read_cap_bounds_the_plan_and_the_apply_takes_only_what_it_counted(kit: Kit) -> None:
    """A filter the store cannot answer (the bot) reads every dead-letter the rest lets through;
    a console page caps it: the plan covers the rows read, and its apply no more."""
    await _plant(kit)
    plan = await plan_bulk_replay(kit.outbox, kit.subs, BulkFilter(bot="b1"), clock=kit.clock,
                                  page=3, max_read=6)
    assert (plan.matched, plan.read, plan.truncated, plan.read_capped) == (4, 6, True, True)
    prog = await _apply(kit, plan)
    assert (prog.replayed, prog.state) == (4, "done")
    assert {r.row_key for r in await kit.rows() if r.state == "pending" and r.audit} == {
        f"t1/{i}/sub/s1" for i in range(1, 5)}


async def test_parked_since_and_before_bound_the_plan(kit: Kit) -> None:
    base = await _plant(kit)
    plan = await _plan(kit, since=base + 10, before=base + 22)
    assert plan.matched == 4 and plan.by_subscription == {"s2": 2, "s3": 2}
    plan = await _plan(kit, since=base + 31)
    assert plan.matched == 2 and plan.by_kind == {"projection": 1, "notify": 1}


async def test_a_walk_over_many_rows_parked_at_one_instant_counts_each_once(kit: Kit) -> None:
    """A worker parks a batch at one ``now``: the walk's position is (updated_at, row_key), so
    pages smaller than the tie still read every row once, and the apply replays each once."""
    for s in SUBS:
        await kit.subs.put(s)
    at = kit.clock.now() - 60
    await kit.outbox.upsert_rows([_dead("t1", i, at) for i in range(1, 101)]
                                 + [_dead("t2", i, at + 1, sub="s3") for i in range(1, 8)])
    plan = await plan_bulk_replay(kit.outbox, kit.subs, BulkFilter(), clock=kit.clock, page=7)
    assert plan.matched == 107 and plan.by_tenant == {"t1": 100, "t2": 7}
    prog = await _apply(kit, plan, page=9)
    assert (prog.replayed, prog.skipped, prog.state) == (107, 0, "done")
    assert all(r.state == "pending" and len(r.audit) == 1 for r in await kit.rows())


async def _apply(kit: Kit, plan: BulkPlan, **kw: Any) -> BulkProgress:
    async def sleep(seconds: float) -> None:
        kit.clock.advance(seconds)

    kw.setdefault("page", 4)
    return await apply_bulk_replay(kit.outbox, kit.subs, plan, bulk_id="b42", by="ops",
                                   clock=kit.clock, rate=kw.pop("rate", 1000.0),
                                   sleep=kw.pop("sleep", sleep), **kw)


async def test_apply_replays_each_row_once_audited_and_keeps_its_history(kit: Kit) -> None:
    await _plant(kit)
    plan = await _plan(kit, tenant="t1")
    kit.clock.advance(5)
    prog = await _apply(kit, plan)
    assert (prog.replayed, prog.skipped, prog.refused, prog.remaining) == (8, 0, 0, 0)
    assert prog.state == "done" and "8 of 8 planned rows replayed" in prog.summary()
    for r in await kit.rows("t1"):
        if r.seq >= 50:
            assert r.audit == []  # pending and done rows: never the plan's
            continue
        assert (r.state, r.attempts, r.claim_id, r.outcome) == ("pending", 0, None, None)
        assert len(r.errors) == 2 and r.errors[-1].error  # history kept
        (entry,) = r.audit
        assert (entry.action, entry.by) == ("replay", "ops")
        assert entry.detail == "attempts reset (bulk replay b42)"
        assert r.not_before <= kit.clock.now()  # due now: a worker runs it at its next tick
    assert {r.state for r in await kit.rows("t2")} == {"failed"}  # another tenant: untouched


async def test_a_row_changed_between_plan_and_apply_is_skipped_not_replayed_twice(kit: Kit) -> None:
    base = await _plant(kit)
    plan = await _plan(kit, tenant="t1", kind="launch")
    assert plan.matched == 6
    # meanwhile: one row replayed by another operator (pending now), one replayed and parked
    # again (failed, but not as the plan read it), one purged
    kit.clock.advance(10)
    assert await kit.outbox.apply_failed("t1/1/sub/s1", tr.replay(now=kit.clock.now(), by="ann"))
    assert await kit.outbox.apply_failed("t1/2/sub/s1", tr.replay(now=kit.clock.now(), by="ann"))
    claims = await kit.outbox.claim_any(kit.clock.now(), 30, 10, tenants=["t1"])
    c2 = next(c for c in claims if c.row is not None and c.row.row_key == "t1/2/sub/s1")
    err = ErrorEntry(attempt=1, at=kit.clock.now(), error="LaunchFailed: again")
    assert await kit.outbox.apply_claimed(c2.ref, c2.claim_id,
                                          tr.park(now=kit.clock.now(), error=err, count_attempt=True))
    from board_outbox.ports import RowFilter

    assert await kit.outbox.purge(RowFilter(tenant_id="t1", states=("failed",),
                                            updated_before=base + 3.5, limit=1)) == 1  # seq 3
    kit.clock.advance(10)
    prog = await _apply(kit, plan)
    assert (prog.replayed, prog.skipped, prog.remaining, prog.state) == (3, 3, 0, "done")
    rows = {r.row_key: r for r in await kit.rows("t1")}
    assert rows["t1/2/sub/s1"].state == "failed"  # parked again after the plan: left alone
    assert [a.by for a in rows["t1/2/sub/s1"].audit] == ["ann"]
    assert "t1/3/sub/s1" not in rows
    for key in ("t1/4/sub/s1", "t1/10/sub/s2", "t1/11/sub/s2"):
        assert rows[key].state == "pending" and [a.by for a in rows[key].audit] == ["ops"]
    for r in rows.values():  # no row was replayed twice
        assert len([a for a in r.audit if a.action == "replay"]) <= 1


async def test_a_row_replayed_under_the_applys_feet_is_skipped(kit: Kit) -> None:
    """Between the page read and its write, another operator replays the very row (and, for
    one of them, a worker runs it and parks it again): the fence (state failed, updated_at as
    read) leaves both alone."""
    await _plant(kit)
    plan = await _plan(kit, tenant="t1", kind="launch")
    order = ["t1/1/sub/s1", "t1/2/sub/s1", "t1/3/sub/s1", "t1/4/sub/s1", "t1/10/sub/s2",
             "t1/11/sub/s2"]
    writes = {"n": 0}

    async def sleep(seconds: float) -> None:  # called before each write but the first
        kit.clock.advance(seconds)
        writes["n"] += 1
        if writes["n"] in (2, 4):  # the row about to be written: replayed by ann first
            key = order[writes["n"]]
            assert await kit.outbox.apply_failed(key, tr.replay(now=kit.clock.now(), by="ann"))
        if writes["n"] == 4:  # ... and run and parked again: failed, as the fence's state says
            (c,) = [c for c in await kit.outbox.claim_any(kit.clock.now(), 30, 10, tenants=["t1"])
                    if c.row is not None and c.row.row_key == order[4]]
            err = ErrorEntry(attempt=1, at=kit.clock.now(), error="LaunchFailed: again")
            assert await kit.outbox.apply_claimed(c.ref, c.claim_id, tr.park(
                now=kit.clock.now(), error=err, count_attempt=True))

    prog = await _apply(kit, plan, sleep=sleep, rate=10.0)
    assert (prog.replayed, prog.skipped, prog.state) == (4, 2, "done")
    rows = {r.row_key: r for r in await kit.rows("t1")}
    assert [a.by for a in rows[order[2]].audit] == ["ann"]
    assert [a.by for a in rows[order[4]].audit] == ["ann"] and rows[order[4]].state == "failed"
    assert [a.by for a in rows[order[3]].audit] == ["ops"]


async def test_a_write_in_flight_when_cancelled_is_finished_and_counted(kit: Kit) -> None:
    """A cancellation that arrives while a replay's write is on the wire (the reply still to
    read) does not cut it: the write is shielded, so what the store did is what is counted."""
    await _plant(kit)
    plan = await _plan(kit)
    real = kit.outbox.apply_failed
    prog = BulkProgress(bulk_id="b42", by="ops", filter="", planned=plan.matched, rate=5.0,
                        started_at=kit.clock.now())
    with anyio.CancelScope() as scope:
        async def landing(row_key: str, t: tr.Transition, **kw: Any) -> bool:
            if prog.replayed == 3:
                scope.cancel()  # while the 4th write is in flight
            moved = await real(row_key, t, **kw)
            await checkpoint()  # reading the reply: where a cancellation would land
            return moved

        kit.outbox.apply_failed = landing  # type: ignore[method-assign]
        await _apply(kit, plan, progress=prog)
    assert scope.cancelled_caught
    pending = [r for r in await kit.rows() if r.state == "pending" and r.audit]
    assert prog.replayed == len(pending) == 4 and prog.remaining == 8


def _replayed_or_untouched(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]],
                           ) -> tuple[set[str], set[str]]:
    """Every row is exactly as before, or replayed whole (pending, attempts 0, one audit entry
    of this bulk replay, history kept): nothing in between."""
    replayed, untouched = set(), set()
    for key, was in before.items():
        now = after[key]
        if now == was:
            untouched.add(key)
            continue
        assert now["state"] == "pending" and now["attempts"] == 0, (key, now)
        assert [a["detail"] for a in now["audit"]] == ["attempts reset (bulk replay b42)"], key
        assert now["errors"] == was["errors"], key
        moved = {*tr.replay(now=0, by="").set, "audit"}  # what a replay writes
        assert {k: v for k, v in now.items() if k not in moved} == \
            {k: v for k, v in was.items() if k not in moved}, key
        replayed.add(key)
    return replayed, untouched


async def test_an_abort_midway_leaves_every_row_replayed_or_untouched(kit: Kit) -> None:
    await _plant(kit)
    plan = await _plan(kit)
    before = await _raw(kit)
    stop = Stop()
    calls = {"n": 0}

    async def sleep(seconds: float) -> None:
        kit.clock.advance(seconds)
        calls["n"] += 1
        if calls["n"] == 5:  # SIGINT while the 6th row waits for its turn
            stop.set()

    prog = await _apply(kit, plan, stop=stop, sleep=sleep, rate=5.0)
    assert (prog.state, prog.replayed, prog.skipped, prog.remaining) == ("aborted", 5, 0, 7)
    assert "aborted: 5 of 12 planned rows replayed" in prog.summary()
    assert "7 left untouched" in prog.summary()
    replayed, untouched = _replayed_or_untouched(before, await _raw(kit))
    assert len(replayed) == 5 and len(untouched) == len(before) - 5


async def test_a_stop_asked_during_a_write_ends_the_run_at_that_row(kit: Kit) -> None:
    """SIGINT while a write is on the wire, and the write slow enough that the next row is due
    at once: nothing more is written."""
    await _plant(kit)
    plan = await _plan(kit)
    stop = Stop()

    def on_progress(p: BulkProgress) -> None:
        kit.clock.advance(10)  # a slow write: the next row's turn has come
        if p.replayed == 2:
            stop.set()

    prog = await _apply(kit, plan, stop=stop, rate=1.0, on_progress=on_progress)
    assert (prog.state, prog.replayed, prog.remaining) == ("aborted", 2, 10)
    assert len([r for r in await kit.rows() if r.state == "pending" and r.audit]) == 2


async def test_a_cancelled_apply_counts_what_it_did(kit: Kit) -> None:
    """The caller's cancellation (a console shutting down) lands between two rows: the row in
    flight finishes (its write is shielded) and the progress it keeps says so."""
    await _plant(kit)
    plan = await _plan(kit)
    before = await _raw(kit)
    prog = BulkProgress(bulk_id="b42", by="ops", filter="", planned=plan.matched, rate=5.0,
                        started_at=kit.clock.now())
    with anyio.CancelScope() as scope:
        async def sleep(seconds: float) -> None:
            kit.clock.advance(seconds)
            if prog.replayed == 4:
                scope.cancel()
            await checkpoint()

        await _apply(kit, plan, sleep=sleep, rate=5.0, progress=prog)
    assert scope.cancelled_caught
    assert (prog.state, prog.replayed, prog.remaining) == ("aborted", 4, 8)
    replayed, _ = _replayed_or_untouched(before, await _raw(kit))
    assert len(replayed) == 4


@pytest.mark.parametrize("point", ["outbox.apply_failed[replay]", "outbox.apply_failed[replay].after"])
async def test_a_crash_midway_leaves_every_row_replayed_or_untouched(kit: Kit, point: str) -> None:
    """The process dies at the 4th write, before it or after it landed: each row is still whole
    (one write a row), and a second bulk replay of the same filter takes the rest."""
    await _plant(kit)
    plan = await _plan(kit)
    before = await _raw(kit)
    kit.faults.crash_at(point, nth=4)
    with pytest.raises(Crash):
        await _apply(kit, plan)
    replayed, _ = _replayed_or_untouched(before, await _raw(kit))
    assert len(replayed) == (4 if point.endswith(".after") else 3)
    again = await _plan(kit)
    assert again.matched == 12 - len(replayed)
    prog = await _apply(kit, again)
    assert prog.replayed == again.matched
    assert {r.state for r in await kit.rows() if r.seq < 50} == {"pending"}


async def test_a_write_the_store_does_not_answer_stops_the_run_and_names_the_row(kit: Kit) -> None:
    await _plant(kit)
    plan = await _plan(kit)
    kit.faults.fail_at("outbox.apply_failed[replay]", nth=3)
    prog = await _apply(kit, plan)
    assert prog.state == "failed" and prog.replayed == 2 and prog.in_doubt == "t1/3/sub/s1"
    assert prog.remaining == 9 and "1 in doubt (t1/3/sub/s1" in prog.summary()
    plan = await _plan(kit)
    kit.faults.fail_at("outbox.failed_page", nth=1)  # a page read fails: nothing in flight
    prog = await _apply(kit, plan)
    assert prog.state == "failed" and prog.in_doubt is None and "StoreUnavailable" in (prog.error or "")


async def test_the_rate_is_honoured_on_an_injected_clock(kit: Kit) -> None:
    await _plant(kit)
    plan = await _plan(kit)
    times: list[float] = []
    real = kit.outbox.apply_failed

    async def timed(row_key: str, t: tr.Transition, **kw: Any) -> bool:
        times.append(kit.clock.now())
        return await real(row_key, t, **kw)

    kit.outbox.apply_failed = timed  # type: ignore[method-assign]
    kit.clock.advance(1)
    start = kit.clock.now()
    prog = await _apply(kit, plan, rate=4.0)
    assert prog.replayed == 12
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 0.25 - 1e-9  # never two writes closer than 1 / rate
    assert times[-1] - start == pytest.approx(11 * 0.25)  # and no slower than asked
    for i, t in enumerate(times):  # any window of W seconds: at most W * rate + 1 writes
        assert sum(1 for u in times if t <= u < t + 1.0) <= 5, i


async def test_an_empty_plan_applies_as_done_with_nothing_written(kit: Kit) -> None:
    await _plant(kit)
    plan = await _plan(kit, tenant="nobody")
    assert plan.matched == 0 and plan.newest is None
    prog = await _apply(kit, plan)
    assert (prog.state, prog.replayed, prog.remaining) == ("done", 0, 0)
    assert not kit.faults.hits["outbox.apply_failed"]


async def test_last_error_class_reads_the_workers_message_or_the_kind() -> None:
    row = _dead("t1", 1, 100.0)
    assert last_error_class(row) == "LaunchFailed"
    assert last_error_class(msgspec.structs.replace(row, errors=[])) is None
    lease = _dead("t1", 1, 100.0, error=LEASE, error_kind="lease_expired")
    assert last_error_class(lease) == "lease_expired"
    dotted = _dead("t1", 1, 100.0, error="aiohttp.ClientError: reset")
    assert last_error_class(dotted) == "aiohttp.ClientError"
