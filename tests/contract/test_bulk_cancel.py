"""Cancel pending rows and re-run done ones by filter, as a plan (A8), on every backend: the
cancel's terminal state (who, when, why), a replica's claim racing the cancel (the fence
decides: a cancelled row is never launched), three applies at once and a crash midway (each row
cancelled or re-run once), a rerun's new row and key, the one-shot rows a rerun leaves, and the
rows re-run already it leaves (a rerun repeated after a crash midway re-runs each row once)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from board_outbox.engine.upkeep.bulk_actions import cancel_write, rerun_write
from board_outbox.engine.upkeep.bulk_replay import apply_bulk, plan_bulk_replay
from board_outbox.model import transitions as tr
from board_outbox.model.dead_letters import BulkFilter, BulkPlan, BulkProgress
from board_outbox.model.records import Claim
from board_outbox.model.row_keys import parse_row_key
from board_outbox.model.search import RowQuery
from board_outbox.model.subscriptions import MatchRule, Subscription
from tests.support.faults import Crash
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

T = "t1"
SUB = Subscription(sub_id="s", tenant_id=T, bot="bot", rule=MatchRule(event_types=("card.created",)))
OTHER = Subscription(sub_id="o", tenant_id="t2", bot="bot",
                     rule=MatchRule(event_types=("card.created",)))
SHIP = Subscription(sub_id="ship", tenant_id=T, bot="shipper",
                    rule=MatchRule(event_types=("card.created",)), consume_labels=("ship",))


async def _materialize(kit: Kit, n: int = 6, subs: tuple[Subscription, ...] = (SUB, OTHER),
                       labels: tuple[str, ...] = ()) -> None:
    for sub in subs:
        await kit.sub(sub)
    for tenant in sorted({s.tenant_id for s in subs}):
        for i in range(1, n + 1):
            await kit.card(tenant, f"c{i}", labels=labels)
            await kit.emit(tenant, "card.created", f"c{i}")
        await kit.tail(seed="earliest").drain_all([tenant])


async def _plan(kit: Kit, state: str, **flt: Any) -> BulkPlan:
    return await plan_bulk_replay(kit.outbox, kit.subs, BulkFilter(state=state, **flt),
                                  clock=kit.clock, page=4)


async def _cancel(kit: Kit, plan: BulkPlan, bulk_id: str = "c1") -> BulkProgress:
    write = cancel_write(kit.outbox, bulk_id=bulk_id, by="ops", why="bot retired", clock=kit.clock)
    return await apply_bulk(kit.outbox, kit.subs, plan, write, bulk_id=bulk_id, by="ops",
                            clock=kit.clock, rate=1000.0, sleep=_no_wait, page=3)


async def _rerun(kit: Kit, plan: BulkPlan, bulk_id: str = "r1") -> BulkProgress:
    write = rerun_write(kit.outbox, bulk_id=bulk_id, by="ops", clock=kit.clock)
    return await apply_bulk(kit.outbox, kit.subs, plan, write, bulk_id=bulk_id, by="ops",
                            clock=kit.clock, rate=1000.0, sleep=_no_wait, page=3)


async def _no_wait(_seconds: float) -> None:
    await anyio.lowlevel.checkpoint()


async def test_cancel_takes_the_filters_pending_rows_audited_and_none_ever_launches(kit: Kit) -> None:
    await _materialize(kit)
    plan = await _plan(kit, "pending", tenant=T)
    assert (plan.action, plan.matched, plan.by_tenant) == ("cancel", 6, {T: 6})
    prog = await _cancel(kit, plan)
    assert (prog.state, prog.applied, prog.skipped, prog.remaining) == ("done", 6, 0, 0)
    assert "6 of 6 planned rows cancelled" in prog.summary()
    rows = {r.row_key: r for r in await kit.rows()}
    mine = [r for r in rows.values() if r.tenant_id == T]
    assert {r.state for r in mine} == {"cancelled"}
    for r in mine:
        (entry,) = r.audit
        assert (entry.action, entry.by, entry.detail, entry.at) == (
            "cancel", "ops", "bot retired (bulk cancel c1)", kit.clock.now())
        assert r.outcome == "cancelled: bot retired (bulk cancel c1)" and r.done_at is not None
    assert {r.state for r in rows.values() if r.tenant_id == "t2"} == {"pending"}
    res = await kit.worker().tick_any()
    assert res.claimed == 6  # t2's only
    assert {r.tenant_id for r in kit.launcher.launches} == {"t2"}
    counts = await kit.outbox.count_by_state(T, states=("cancelled", "pending"))
    assert counts == {"cancelled": 6}
    found = await kit.outbox.search(RowQuery(form="state", state="cancelled", limit=50))
    assert len(found) == 6


async def test_a_replica_claiming_between_plan_and_apply_wins_and_a_cancelled_row_never_launches(
        kit: Kit) -> None:
    """The race: the plan reads six pending rows; a replica claims three of them; the cancel
    then skips those three (claimed: the fence refuses) and cancels the other three; the replica
    launches its three, and no worker ever launches a cancelled one."""
    await _materialize(kit, subs=(SUB,))
    plan = await _plan(kit, "pending")
    assert plan.matched == 6
    replica = kit.worker(batch_size=3)
    kit.faults.crash_at("launcher.launch")  # claimed, not launched yet: the claim stands
    with pytest.raises(Crash):
        await replica.tick_any()
    kit.faults.clear()
    prog = await _cancel(kit, plan)
    assert (prog.applied, prog.skipped) == (3, 3)
    states = sorted(r.state for r in await kit.rows())
    assert states == ["cancelled"] * 3 + ["claimed"] * 3
    kit.clock.advance(600)  # the crashed claims expire: another worker reclaims them
    for _ in range(3):
        await kit.worker().tick_any()
    launched = {r.row_key for r in kit.launcher.launches}
    cancelled = {r.row_key for r in await kit.rows() if r.state == "cancelled"}
    assert len(launched) == 3 and not launched & cancelled


async def test_three_applies_at_once_and_a_crash_midway_cancel_each_row_once(kit: Kit) -> None:
    await _materialize(kit, subs=(SUB,))
    plan = await _plan(kit, "pending")
    kit.faults.crash_at("outbox.apply_unclaimed[cancel]", nth=3)  # the first apply dies at its 3rd row
    with pytest.raises(Crash):
        await _cancel(kit, plan, "a")
    kit.faults.clear()
    progs: list[BulkProgress] = []

    async def one(bulk_id: str) -> None:
        progs.append(await _cancel(kit, plan, bulk_id))

    async with anyio.create_task_group() as tg:
        for bulk_id in ("b", "c", "d"):
            tg.start_soon(one, bulk_id)
    assert sum(p.applied for p in progs) == 4  # the 6 planned, less the 2 the first one did
    rows = await kit.rows()
    assert all(r.state == "cancelled" and len(r.audit) == 1 for r in rows)
    await kit.worker().tick_any()
    assert kit.launcher.launches == []


async def test_rerun_writes_one_new_row_per_done_row_with_a_new_key(kit: Kit) -> None:
    await _materialize(kit, n=3, subs=(SUB,))
    await kit.worker().tick_any()
    assert len(kit.launcher.launches) == 3
    plan = await _plan(kit, "done")
    assert (plan.action, plan.matched) == ("rerun", 3)
    progs: list[BulkProgress] = []

    async def one(bulk_id: str) -> None:
        progs.append(await _rerun(kit, plan, bulk_id))

    async with anyio.create_task_group() as tg:  # three operators apply the same plan
        for bulk_id in ("r1", "r2", "r3"):
            tg.start_soon(one, bulk_id)
    assert sum(p.applied for p in progs) == 3
    rows = {r.row_key: r for r in await kit.rows()}
    reruns = [r for r in rows.values() if r.rerun_of is not None]
    assert sorted(r.row_key for r in reruns) == [f"{T}/{i}/sub/s/rerun/1" for i in (1, 2, 3)]
    for r in reruns:
        assert parse_row_key(r.row_key).rerun == 1 and r.state == "pending"
        assert rows[r.rerun_of].state == "done"  # type: ignore[index]
        assert [a.action for a in rows[r.rerun_of].audit] == ["rerun"]  # type: ignore[index]
    await kit.worker().tick_any()
    keys = [r.row_key for r in kit.launcher.launches]
    assert len(keys) == 6 and len(set(keys)) == 6  # the bot sees new Idempotency-Keys
    again = await _plan(kit, "done", subscription="s")
    assert (again.matched, again.already_rerun) == (0, 6)  # re-run once: left out, counted
    again = await _plan(kit, "done", subscription="s", include_rerun=True)
    assert (again.matched, again.already_rerun) == (6, 0)  # asked to: the originals' 2nd, ...
    assert "include-rerun" in again.filter.describe()
    await _rerun(kit, again, "r4")
    keys = {r.row_key for r in await kit.rows() if r.state == "pending"}
    assert f"{T}/1/sub/s/rerun/2" in keys and f"{T}/1/sub/s/rerun/1/rerun/1" in keys


async def test_a_crash_between_the_new_row_and_the_note_still_reruns_once(kit: Kit) -> None:
    await _materialize(kit, n=2, subs=(SUB,))
    await kit.worker().tick_any()
    plan = await _plan(kit, "done")
    kit.faults.crash_at("outbox.apply_unclaimed[rerun_noted]")  # the new row is in, the note is not
    with pytest.raises(Crash):
        await _rerun(kit, plan)
    kit.faults.clear()
    prog = await _rerun(kit, plan, "again")
    assert prog.applied == 2
    reruns = [r for r in await kit.rows() if r.rerun_of]
    assert sorted(r.row_key for r in reruns) == [f"{T}/1/sub/s/rerun/1", f"{T}/2/sub/s/rerun/1"]


async def _run_all(kit: Kit) -> None:
    """Every due pending row run by a worker (a rerun's new rows done, as a service would)."""
    for _ in range(10):
        if not (await kit.worker().tick_any()).claimed:
            return
    raise AssertionError("rows still pending after 10 ticks")


async def test_a_rerun_repeated_after_a_crash_midway_reruns_only_the_rows_not_yet_rerun(
        kit: Kit) -> None:
    """The operator's move after a kill midway: the same command again, a fresh plan of the
    same filter, no bound. The killed apply noted two rows and wrote the third's new row, not
    its note; a worker then ran the three new rows (done: a rerun themselves). The repeat plans
    the four rows not noted, counts the rest as re-run already, and writes the half-done row's
    note under its first key: every row re-run once, ``/rerun/1``, never ``/rerun/2`` nor a
    rerun of a rerun; each new key launched once. Asked to (``include_rerun``), a second
    rerun writes ``/rerun/2``."""
    await _materialize(kit, n=6, subs=(SUB,))
    await _run_all(kit)
    originals = sorted(r.row_key for r in await kit.rows())
    plan = await _plan(kit, "done")
    assert (plan.matched, plan.already_rerun) == (6, 0)
    kit.faults.crash_at("outbox.apply_unclaimed[rerun_noted]", nth=3)  # the 3rd row's note
    with pytest.raises(Crash):
        await _rerun(kit, plan, "killed")
    kit.faults.clear()
    half = originals[2]
    first = await kit.raw_row(f"{half}/rerun/1")
    assert first is not None and (await kit.raw_row(half) or {}).get("audit") in (None, [])
    await _run_all(kit)  # the killed apply's three new rows run before the operator repeats
    kit.clock.advance(5)
    repeat = await _plan(kit, "done")
    assert (repeat.matched, repeat.already_rerun) == (4, 5)  # 2 noted + 3 new rows, done
    prog = await _rerun(kit, repeat, "repeat")
    assert (prog.state, prog.applied, prog.skipped) == ("done", 4, 0)
    await _run_all(kit)
    rows = {r.row_key: r for r in await kit.rows()}
    assert sorted(rows) == sorted([*originals, *(f"{k}/rerun/1" for k in originals)])
    for key in originals:
        notes = [a for a in rows[key].audit if a.action == "rerun"]
        assert len(notes) == 1 and notes[0].detail.startswith(f"re-run as {key}/rerun/1 "), notes
        assert rows[f"{key}/rerun/1"].state == "done"
    assert (await kit.raw_row(f"{half}/rerun/1") or {})["created_at"] == first["created_at"]
    keys = [r.row_key for r in kit.launcher.launches]
    assert sorted(keys) == sorted([*originals, *(f"{k}/rerun/1" for k in originals)])
    third = await _plan(kit, "done")
    assert (third.matched, third.already_rerun) == (0, 12)
    asked = await _plan(kit, "done", include_rerun=True)
    assert (asked.matched, asked.already_rerun) == (12, 0)
    await _rerun(kit, asked, "again")
    pending = {r.row_key for r in await kit.rows() if r.state == "pending"}
    assert {f"{k}/rerun/2" for k in originals} < pending


async def test_rerun_leaves_one_shot_rows_unless_asked(kit: Kit) -> None:
    await _materialize(kit, n=2, subs=(SUB, SHIP), labels=("ship",))
    await kit.worker().tick_any()
    plan = await _plan(kit, "done")
    assert (plan.matched, plan.one_shot, plan.by_subscription) == (2, 2, {"s": 2})
    plan = await _plan(kit, "done", include_one_shot=True)
    assert (plan.matched, plan.one_shot) == (4, 0)


# --- a cancel with include_expired: claimed rows whose lease ended ---------------------------

LEASE = 30.0


async def _claimed(kit: Kit, n: int) -> list[Claim]:
    """``n`` of the tenant's due pending rows claimed now under a LEASE-second lease (no
    expired lease reclaimed)."""
    claims = await kit.outbox.claim_any(kit.clock.now(), LEASE, n, tenants=[T])
    assert len(claims) == n
    return claims


def _key(c: Claim) -> str:
    assert c.row is not None
    return c.row.row_key


async def test_include_expired_cancels_claimed_rows_whose_lease_ended_and_no_live_one(
        kit: Kit) -> None:
    """Two rows claimed, their holder gone past its lease; one claimed under a live lease; one
    pending. Without the opt-in the cancel takes the pending row only; with it, the two expired
    rows too, counted apart, never the live one. The dead holder's marks are refused and the
    rows stay cancelled; the live row runs, no cancelled row ever launches."""
    await _materialize(kit, n=4, subs=(SUB,))
    dead = await _claimed(kit, 2)
    kit.clock.advance(LEASE + 1)
    (live,) = await _claimed(kit, 1)
    plain = await _plan(kit, "pending")
    assert (plain.matched, plain.expired) == (1, 0)
    plan = await _plan(kit, "pending", include_expired=True)
    assert (plan.matched, plan.pending, plan.expired, plan.live) == (3, 1, 2, 1)
    assert "include-expired" in plan.filter.describe()
    prog = await _cancel(kit, plan)
    assert (prog.state, prog.applied, prog.skipped, prog.remaining) == ("done", 3, 0, 0)
    rows = {r.row_key: r for r in await kit.rows()}
    assert {_key(c) for c in dead} < {k for k, r in rows.items() if r.state == "cancelled"}
    assert rows[_key(live)].state == "claimed"
    assert sorted(r.state for r in rows.values()) == ["cancelled"] * 3 + ["claimed"]
    for c in dead:
        r = rows[_key(c)]
        assert (r.claim_id, r.lease_until) == (None, None)
        assert r.audit[-1].action == "cancel"
        # the presumed-dead holder wakes: its beat and its mark are refused
        now = kit.clock.now()
        assert not await kit.outbox.apply_claimed(
            c.ref, c.claim_id, tr.extend_lease(now=now, lease_until=now + LEASE))
        assert not await kit.outbox.apply_claimed(c.ref, c.claim_id,
                                                  tr.done(now=now, outcome="launched"))
        assert (await kit.raw_row(_key(c)) or {})["state"] == "cancelled"
    kit.clock.advance(LEASE + 1)  # the live row's holder dies too: a replica reclaims it
    await kit.worker().tick_any()
    assert [r.row_key for r in kit.launcher.launches] == [_key(live)]


async def test_without_the_opt_in_a_cancel_never_touches_a_claimed_row(kit: Kit) -> None:
    """Every row claimed and expired: the plan without include_expired counts none, and an
    apply handed a larger plan still writes no claimed row."""
    await _materialize(kit, n=3, subs=(SUB,))
    await _claimed(kit, 3)
    kit.clock.advance(LEASE * 10)
    plan = await _plan(kit, "pending")
    assert (plan.matched, plan.expired, plan.live) == (0, 0, 0)
    forged = BulkPlan(filter=plan.filter, planned_at=kit.clock.now(), action="cancel",
                      matched=3, newest=kit.clock.now())
    prog = await _cancel(kit, forged)
    assert (prog.applied, prog.skipped) == (0, 3)
    assert {r.state for r in await kit.rows()} == {"claimed"}


async def test_a_holder_that_beats_or_a_replica_that_reclaims_after_the_read_wins(kit: Kit) -> None:
    """The race, exactly: the apply reads three expired rows; before each write, the first
    row's holder beats and a replica reclaims the second; the fence skips both and cancels the
    third. A lease beaten after the plan is past the plan's time: not taken at all."""
    await _materialize(kit, n=4, subs=(SUB,))
    held = await _claimed(kit, 4)
    kit.clock.advance(LEASE + 1)
    plan = await _plan(kit, "pending", include_expired=True)
    assert (plan.matched, plan.expired) == (4, 4)
    by_key = {_key(c): c for c in held}
    first, second, third, fourth = sorted(by_key)
    kit.clock.advance(1)
    now = kit.clock.now()
    assert await kit.outbox.apply_claimed(  # beaten after the plan, before the apply's read
        by_key[fourth].ref, by_key[fourth].claim_id, tr.extend_lease(now=now, lease_until=now + LEASE))
    cancel = cancel_write(kit.outbox, bulk_id="race", by="ops", why="w", clock=kit.clock)
    met: list[str] = []

    async def raced(row: Any) -> bool:
        met.append(row.row_key)
        kit.clock.advance(0.5)
        now = kit.clock.now()
        c = by_key[row.row_key]
        if row.row_key == first:  # the holder was alive: it beats between read and write
            assert await kit.outbox.apply_claimed(
                c.ref, c.claim_id, tr.extend_lease(now=now, lease_until=now + LEASE))
        elif row.row_key == second:  # a replica reclaims it between read and write (the
            # transition ``reclaim_expired`` applies, on this row alone)
            assert await kit.outbox.apply_claimed(
                c.ref, c.claim_id, tr.reclaim(claim_id="rival", now=now, lease_until=now + LEASE))
        return await cancel(row)

    prog = await apply_bulk(kit.outbox, kit.subs, plan, raced, bulk_id="race", by="ops",
                            clock=kit.clock, rate=1000.0, sleep=_no_wait, page=3)
    assert met == [first, second, third]  # the one beaten after the plan is not the plan's
    rows = {r.row_key: r for r in await kit.rows()}
    assert [rows[k].state for k in (first, second, third, fourth)] == [
        "claimed", "claimed", "cancelled", "claimed"]
    assert rows[first].claim_id == by_key[first].claim_id and rows[second].claim_id == "rival"
    assert (prog.state, prog.applied, prog.skipped) == ("done", 1, 3)


async def test_the_apply_takes_only_leases_ended_when_the_plan_was_read(kit: Kit) -> None:
    """A lease that ends between the plan and the apply is not the plan's, even when it sorts
    ahead of the one the plan counted: the operator confirmed what the plan showed."""
    await _materialize(kit, n=2, subs=(SUB,))
    (longer,) = await kit.outbox.claim_any(kit.clock.now(), 3 * LEASE, 1, tenants=[T])
    kit.clock.advance(1)
    (shorter,) = await _claimed(kit, 1)
    kit.clock.advance(LEASE + 1)
    plan = await _plan(kit, "pending", include_expired=True)
    assert (plan.matched, plan.expired, plan.live) == (1, 1, 1)
    kit.clock.advance(2 * LEASE)  # the longer lease has ended too, after the plan
    prog = await _cancel(kit, plan)
    assert (prog.applied, prog.skipped) == (1, 0)
    states = {r.row_key: r.state for r in await kit.rows()}
    assert (states[_key(shorter)], states[_key(longer)]) == ("cancelled", "claimed")
