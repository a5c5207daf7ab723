"""The effect worker's guarantees (SPEC M4, M5, M6, M8, M9, M10, M10b, C2), on every backend."""

from __future__ import annotations

import logging

import anyio
import pytest

from board_outbox.engine.handlers.registry import ExecutionContext
from board_outbox.model.errors import LaunchFailed
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import LaunchRequest
from tests.support.faults import Crash
from tests.support.kits import Kit, claim

pytestmark = pytest.mark.anyio

T = "t1"
SUB = Subscription(sub_id="s", tenant_id=T, bot="bot",
                   rule=MatchRule(event_types=("card.created",)))
SHIP = Subscription(sub_id="ship", tenant_id=T, bot="shipper",
                    rule=MatchRule(event_types=("card.labeled",)), consume_labels=("ship",))


async def materialize(kit: Kit, sub: Subscription = SUB, n: int = 1, etype: str = "card.created",
                      labels: tuple[str, ...] = ()) -> None:
    await kit.sub(sub)
    for i in range(1, n + 1):
        await kit.card(T, f"c{i}", labels=labels)
        await kit.emit(T, etype, f"c{i}")
    await kit.tail(seed="earliest").drain_all([T])


async def only_row(kit: Kit) -> EffectRow:
    (row,) = await kit.rows(T)
    return row


def always_fail(_req: LaunchRequest) -> bool:
    return True


# --- steady state -------------------------------------------------------------------------


async def test_rows_execute_exactly_once_in_steady_state(kit: Kit) -> None:
    await materialize(kit, n=5)
    worker = kit.worker()
    res = await worker.tick_any()
    assert (res.claimed, res.done) == (5, 5)
    assert sorted(r.seq for r in kit.launcher.launches) == [1, 2, 3, 4, 5]
    assert (await worker.tick_any()).claimed == 0
    assert {r.state for r in await kit.rows(T)} == {"done"}
    assert all(r.outcome and r.outcome.startswith("launched") for r in await kit.rows(T))


async def test_four_workers_racing_execute_each_row_once(kit: Kit) -> None:
    await materialize(kit, n=30)
    workers = [kit.worker(batch_size=3) for _ in range(4)]

    async def run(w: object) -> None:
        for _ in range(15):
            await w.tick_any()  # type: ignore[attr-defined]

    async with anyio.create_task_group() as tg:
        for w in workers:
            tg.start_soon(run, w)
    seqs = [r.seq for r in kit.launcher.launches]
    assert sorted(seqs) == list(range(1, 31))  # none lost, none doubled


# --- M4 / M9: leases and reclaim ----------------------------------------------------------


async def test_orphaned_claim_is_reclaimed_after_lease_with_attempts_incremented(kit: Kit) -> None:
    await materialize(kit)
    worker = kit.worker(lease_seconds=30)
    kit.faults.crash_at("launcher.launch")  # the worker process dies mid-effect
    with pytest.raises(Crash):
        await worker.tick_any()
    assert (await only_row(kit)).state == "claimed"
    survivor = kit.worker(lease_seconds=30)
    kit.clock.advance(29)
    assert (await survivor.tick_any()).claimed == 0  # the lease still holds
    kit.clock.advance(2)
    res = await survivor.tick_any()
    assert res.done == 1
    row = await only_row(kit)
    assert row.state == "done" and row.attempts == 1
    assert [e.kind for e in row.errors] == ["lease_expired"]


async def test_hung_effect_burns_its_budget_and_parks(
    kit: Kit, caplog: pytest.LogCaptureFixture
) -> None:
    await materialize(kit)
    max_attempts = 3
    for _ in range(max_attempts):  # each "worker" claims and hangs past its lease
        claims = await claim(kit.outbox, T, kit.clock.now(), 10.0, 5)
        assert len(claims) == 1
        kit.clock.advance(11)
    with caplog.at_level(logging.WARNING, logger="board_outbox.worker"):
        res = await kit.worker(lease_seconds=10, max_attempts=max_attempts).tick_any()
    assert res.failed == 1 and kit.launcher.launches == []
    row = await only_row(kit)
    assert row.state == "failed" and row.attempts == max_attempts
    assert "expired leases" in row.errors[-1].error
    assert len([r for r in caplog.records if "dead-letter" in r.getMessage()]) == 1


async def test_a_spent_row_given_back_at_shutdown_parks_at_its_next_claim(kit: Kit) -> None:
    """Found by the fault harness's graceful stops: a replica reclaims a row whose expired
    leases spent its budget and is stopping, so it gives the row back (pending, attempts at the
    budget). The next claim must park it, not run attempt budget + 1."""
    await materialize(kit)
    max_attempts = 2
    for _ in range(max_attempts):  # claims that hang past their lease
        assert len(await claim(kit.outbox, T, kit.clock.now(), 10.0, 5)) == 1
        kit.clock.advance(11)
    stopping = kit.worker(lease_seconds=10, max_attempts=max_attempts)
    stopping.stopping = True  # it reclaims, then gives the row back without running it
    res = await stopping.tick_any()
    assert res.claimed == 1 and res.released == 1
    row = await only_row(kit)
    assert row.state == "pending" and row.attempts == max_attempts
    res = await kit.worker(lease_seconds=10, max_attempts=max_attempts).tick_any()
    assert res.failed == 1 and kit.launcher.launches == []
    row = await only_row(kit)
    assert row.state == "failed" and row.attempts == max_attempts
    assert "expired leases" in row.errors[-1].error


async def test_a_spent_row_parks_even_when_its_new_lease_ran_out_before_it_started(kit: Kit) -> None:
    """The reclaim that spent the budget, then a stall past the new lease before the row starts:
    left to the next reclaim it would count attempt budget + 1; it parks under its claim."""
    await materialize(kit)
    max_attempts = 2
    for _ in range(max_attempts - 1):
        assert len(await claim(kit.outbox, T, kit.clock.now(), 10.0, 5)) == 1
        kit.clock.advance(11)
    assert len(await claim(kit.outbox, T, kit.clock.now(), 10.0, 5)) == 1
    kit.clock.advance(11)
    (reclaimed,) = await kit.outbox.reclaim_expired(kit.clock.now(), 10.0, 5)
    assert reclaimed.row is not None and reclaimed.row.attempts == max_attempts
    kit.clock.advance(11)  # its new lease ran out too, before the worker started it
    worker = kit.worker(lease_seconds=10, max_attempts=max_attempts)
    assert await worker.execute(reclaimed) == "failed"
    row = await only_row(kit)
    assert row.state == "failed" and row.attempts == max_attempts and kit.launcher.launches == []


# --- M5: backoff and the dead-letter --------------------------------------------------------


async def test_backoff_schedule_then_dead_letter_warned_once(
    kit: Kit, caplog: pytest.LogCaptureFixture
) -> None:
    await materialize(kit)
    kit.launcher.fail = always_fail
    worker = kit.worker(max_attempts=5, backoff={"base_seconds": 1.0, "factor": 2.0,
                                                 "cap_seconds": 5.0, "jitter": 0.0})
    delays = []
    with caplog.at_level(logging.WARNING, logger="board_outbox.worker"):
        for _ in range(4):
            before = kit.clock.now()
            assert (await worker.tick_any()).retried == 1
            row = await only_row(kit)
            delays.append(row.not_before - before)
            assert (await worker.tick_any()).claimed == 0  # not due yet: no busy retry
            kit.clock.advance(row.not_before - before)
        assert (await worker.tick_any()).failed == 1
        for _ in range(3):
            kit.clock.advance(100)
            assert (await worker.tick_any()).claimed == 0  # parked rows are never claimed
    assert delays == [1.0, 2.0, 4.0, 5.0]  # exponential, capped
    row = await only_row(kit)
    assert row.state == "failed" and row.attempts == 5
    assert [e.attempt for e in row.errors] == [1, 2, 3, 4, 5]
    assert all("LaunchFailed" in e.error for e in row.errors)
    assert len([r for r in caplog.records if "dead-letter" in r.getMessage()]) == 1


def test_backoff_jitter_stays_within_bounds_and_cap() -> None:
    import random

    from board_outbox.model.backoff import BackoffPolicy

    p = BackoffPolicy(base_seconds=2.0, factor=2.0, cap_seconds=20.0, jitter=0.25)
    rng = random.Random(3)
    for attempt, raw in [(1, 2.0), (2, 4.0), (3, 8.0)]:
        d = [p.delay(attempt, rng) for _ in range(200)]
        assert min(d) >= raw * 0.75 and max(d) <= raw * 1.25
        assert max(d) - min(d) > raw * 0.3  # it really jitters
    assert all(p.delay(10, rng) <= 20.0 for _ in range(100))


# --- M6: consume_labels ----------------------------------------------------------------------


async def test_launch_failure_after_consume_retries_without_second_consume(kit: Kit) -> None:
    await materialize(kit, SHIP, etype="card.labeled", labels=("ship",))
    fails = iter([True])
    kit.launcher.fail = lambda _r: next(fails, False)
    worker = kit.worker(backoff={"jitter": 0.0, "base_seconds": 1.0})
    assert (await worker.tick_any()).retried == 1
    row = await only_row(kit)
    assert row.consume_marked and row.state == "pending"
    assert (await kit.cards.get(T, "c1")).labels == ()  # spent
    kit.clock.advance(2)
    assert (await worker.tick_any()).done == 1
    assert kit.faults.hits["labels.consume"] == 1  # one-shot spent exactly once
    assert [r.bot for r in kit.launcher.launches] == ["shipper"]  # and the launch happened


async def test_worker_crash_after_consume_marked_still_launches_once(kit: Kit) -> None:
    await materialize(kit, SHIP, etype="card.labeled", labels=("ship",))
    kit.faults.crash_at("outbox.apply_claimed[consumed].after")
    with pytest.raises(Crash):
        await kit.worker(lease_seconds=5).tick_any()
    kit.clock.advance(6)
    assert (await kit.worker(lease_seconds=5).tick_any()).done == 1
    assert kit.faults.hits["labels.consume"] == 1 and len(kit.launcher.launches) == 1


async def test_crash_between_consume_and_mark_no_longer_loses_the_launch(kit: Kit) -> None:
    """ADR-094 accepts losing one launch to a crash between the label consume and the
    consume_marked write. Here the consume records which row spent the one-shot, in the same
    write, so the retry learns the labels were its own and launches: that window is closed."""
    await materialize(kit, SHIP, etype="card.labeled", labels=("ship",))
    kit.faults.crash_at("labels.consume.after")
    with pytest.raises(Crash):
        await kit.worker(lease_seconds=5).tick_any()
    kit.clock.advance(6)
    await kit.worker(lease_seconds=5).tick_any()
    row = await only_row(kit)
    assert row.state == "done" and str(row.outcome).startswith("launched")
    assert [r.bot for r in kit.launcher.launches] == ["shipper"]
    assert (await kit.cards.get(T, "c1")).labels == ()  # spent once, not twice


async def test_residual_window_crash_between_launch_and_done_doubles_one_launch(kit: Kit) -> None:
    """ADR-094's second documented residual window."""
    await materialize(kit)
    kit.faults.crash_at("launcher.launch.after")
    with pytest.raises(Crash):
        await kit.worker(lease_seconds=5).tick_any()
    kit.clock.advance(6)
    await kit.worker(lease_seconds=5).tick_any()
    assert [r.seq for r in kit.launcher.launches] == [1, 1]


# --- M8: fencing ------------------------------------------------------------------------------


async def test_stolen_lease_makes_late_writes_no_ops(kit: Kit) -> None:
    await materialize(kit)
    entered, release = anyio.Event(), anyio.Event()
    calls = 0

    class SlowHandler:
        async def execute(self, row: EffectRow, ctx: ExecutionContext) -> str:
            nonlocal calls
            calls += 1
            if calls == 1:
                entered.set()
                await release.wait()
                return "slow finished"
            return "thief finished"

    reg = kit.registry()
    reg.register("launch", SlowHandler(), replace=True)
    slow = kit.worker(registry=reg, lease_seconds=10)
    thief = kit.worker(registry=reg, lease_seconds=10)
    results = {}

    async def run_slow() -> None:
        results["slow"] = await slow.tick_any()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_slow)
        await entered.wait()
        kit.clock.advance(11)  # the slow worker's lease expires ...
        results["thief"] = await thief.tick_any()  # ... and the row is stolen and finished
        release.set()
    assert results["thief"].done == 1
    assert results["slow"].lease_lost == 1 and results["slow"].done == 0
    row = await only_row(kit)
    assert row.state == "done" and row.outcome == "thief finished"  # not resurrected


async def test_rows_whose_lease_expired_before_reached_are_skipped(kit: Kit) -> None:
    await materialize(kit, n=2)

    class ClockEater:
        async def execute(self, row: EffectRow, ctx: ExecutionContext) -> str:
            kit.clock.advance(20)  # the first row takes longer than the lease
            return "ok"

    reg = kit.registry()
    reg.register("launch", ClockEater(), replace=True)
    res = await kit.worker(registry=reg, lease_seconds=10).tick_any()
    assert (res.claimed, res.done, res.skipped_expired) == (2, 1, 1)


# --- M10 / M10b ------------------------------------------------------------------------------


async def test_transient_subscription_lookup_retries(kit: Kit) -> None:
    await materialize(kit)
    kit.faults.fail_at("subs.get_many")  # the tick's batch read fails: the row reads its own
    kit.faults.fail_at("subs.get")  # ... which fails too
    worker = kit.worker(backoff={"jitter": 0.0})
    assert (await worker.tick_any()).retried == 1
    assert (await only_row(kit)).attempts == 1 and kit.launcher.launches == []
    kit.clock.advance(5)
    assert (await worker.tick_any()).done == 1 and len(kit.launcher.launches) == 1


async def test_deleted_subscription_drops_the_row(kit: Kit) -> None:
    await materialize(kit)
    await kit.subs.delete("s")
    assert (await kit.worker().tick_any()).done == 1
    assert (await only_row(kit)).outcome == "dropped: subscription deleted"
    assert kit.launcher.launches == []


async def test_execution_reverifies_the_current_rule(kit: Kit) -> None:
    await materialize(kit, n=2)
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="bot",
                               rule=MatchRule(event_types=("card.moved",))))  # operator edit
    assert (await kit.worker().tick_any()).done == 2
    assert {r.outcome for r in await kit.rows(T)} == {"dropped: no longer matches"}
    assert kit.launcher.launches == []


async def test_cross_tenant_row_is_refused(kit: Kit) -> None:
    await materialize(kit)
    await kit.sub(Subscription(sub_id="s", tenant_id="intruder", bot="bot"))  # sub moved tenant
    res = await kit.worker().tick_any()
    assert res.failed == 1 and kit.launcher.launches == []
    row = await only_row(kit)
    assert row.state == "failed" and "CrossTenantRow" in row.errors[-1].error


async def test_disabled_last_subscription_still_settles_its_rows(kit: Kit) -> None:
    await materialize(kit, n=2)
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="bot", enabled=False,
                               rule=SUB.rule))
    worker = kit.worker()
    res = await worker.tick_any()  # the claim reads rows, not subscriptions: both still run
    assert res.done == 2
    assert {r.state for r in await kit.rows(T)} == {"done"}


# --- C2: the registry -------------------------------------------------------------------------


async def test_unknown_kind_is_dead_lettered_with_a_clear_error(kit: Kit) -> None:
    await kit.insert_raw_row({"tenant_id": T, "row_key": "x/1", "seq": 1, "kind": "teleport",
                              "state": "pending", "not_before": 0.0})
    res = await kit.worker().tick_any()
    assert res.failed == 1
    row = await kit.outbox.get("x/1")
    assert row is not None and row.state == "failed"
    assert "no effect handler registered for kind 'teleport'" in row.errors[-1].error


async def test_deployment_registered_kind_is_dispatched(kit: Kit) -> None:
    await kit.insert_raw_row({"tenant_id": T, "row_key": "n/1", "seq": 1, "kind": "notify",
                              "state": "pending", "not_before": 0.0})
    seen: list[str] = []

    class Notify:
        async def execute(self, row: EffectRow, ctx: ExecutionContext) -> str:
            seen.append(row.row_key)
            return "notified"

    reg = kit.registry()
    reg.register("notify", Notify())
    assert (await kit.worker(registry=reg).tick_any()).done == 1
    assert seen == ["n/1"]
    with pytest.raises(ValueError, match="already registered"):
        reg.register("notify", Notify())


async def test_projection_rows_feed_board_reflect(kit: Kit) -> None:
    await kit.card(T, "c1", column="inbox")
    await kit.emit(T, "card.created", "c1")
    await kit.card(T, "c1", column="review")
    await kit.emit(T, "card.moved", "c1")
    await kit.emit(T, "card.deleted", "c2")
    await kit.tail(seed="earliest", projections=("board-reflect",)).drain_all([T])
    worker = kit.worker(registry=kit.registry(["board-reflect"]))
    assert (await worker.tick_any()).done == 3
    model = {d["card_id"]: d for d in await kit.readmodels.list("board-reflect", T)}
    assert model["c1"]["column"] == "review" and model["c1"]["last_seq"] == 2
    assert model["c2"]["deleted"] is True


async def test_malformed_row_is_parked_not_crashing(kit: Kit) -> None:
    await kit.insert_raw_row({"tenant_id": T, "row_key": "m/1", "seq": "x", "state": "pending",
                              "not_before": 0.0})
    await materialize(kit)  # a good row behind it still runs
    res = await kit.worker().tick_any()
    assert (res.failed, res.done) == (1, 1)
    raw = await kit.raw_row("m/1")
    assert raw is not None and raw["state"] == "failed"
    assert "malformed row" in raw["errors"][-1]["error"]


async def test_launch_failed_is_the_retry_type(kit: Kit) -> None:
    """A LaunchFailed is retried with backoff: the row goes back to pending, one attempt counted,
    due after the backoff delay, and the next attempt launches. It is never parked at once."""
    await materialize(kit)
    refusals = iter([True])

    def refuse_once(req: LaunchRequest) -> bool:
        if next(refusals, False):
            raise LaunchFailed(f"bot runner refused {req.row_key}")
        return False

    kit.launcher.fail = refuse_once
    worker = kit.worker(max_attempts=5, backoff={"base_seconds": 3.0, "jitter": 0.0})
    before = kit.clock.now()
    res = await worker.tick_any()
    assert (res.retried, res.failed, res.done) == (1, 0, 0)
    row = await only_row(kit)
    assert row.state == "pending" and row.attempts == 1
    assert row.not_before == before + 3.0  # the backoff's first delay, not "now"
    assert [e.kind for e in row.errors] == ["error"] and "LaunchFailed" in row.errors[0].error
    assert (await worker.tick_any()).claimed == 0  # not due before its backoff
    kit.clock.advance(3.0)
    assert (await worker.tick_any()).done == 1
    assert [r.row_key for r in kit.launcher.launches] == [row.row_key]


# --- regressions found by the fault-injection harness (tests/harness) ----------------------


async def test_lease_lost_right_after_consume_still_launches_exactly_once(kit: Kit) -> None:
    """Found by the harness: worker A consumed the one-shot, then lost its lease before
    persisting consume_marked; B's consume found the labels gone and skipped -> no launch at all.
    Now the consume records the row that spent it: B learns the one-shot is this row's and
    launches; A, fenced out, writes and launches nothing."""
    await materialize(kit, SHIP, etype="card.labeled", labels=("ship",))
    a, b = kit.worker(lease_seconds=10), kit.worker(lease_seconds=10)
    real_consume = kit.labels.consume

    stalled = []

    async def consume_then_stall(*args: object, **kwargs: object) -> str:
        ok = await real_consume(*args, **kwargs)  # type: ignore[arg-type]
        if not stalled:  # only A's call stalls
            stalled.append(True)
            kit.clock.advance(11)  # A stalls past its lease right after the consume ...
            await b.tick_any()  # ... B reclaims the row while A is still inside its attempt
        return ok

    kit.labels.consume = consume_then_stall  # type: ignore[method-assign]
    res = await a.tick_any()
    assert res.lease_lost == 1
    assert [r.bot for r in kit.launcher.launches] == ["shipper"]  # exactly one launch, by B
    row = await only_row(kit)
    assert row.state == "done" and str(row.outcome).startswith("launched")


async def test_transient_consume_mark_failure_still_launches(kit: Kit) -> None:
    """Found by the harness: a store blip on the consume_marked write made the retry skip."""
    await materialize(kit, SHIP, etype="card.labeled", labels=("ship",))
    kit.faults.fail_at("outbox.apply_claimed[consumed]", times=3)
    res = await kit.worker().tick_any()
    assert res.done == 1 and len(kit.launcher.launches) == 1
    assert kit.faults.fired["outbox.apply_claimed[consumed]"] == 3


async def test_transient_mark_done_failure_is_retried_not_relaunched(kit: Kit) -> None:
    """Found by the harness: a store blip on mark_done left the row claimed; after the lease it
    ran again -> a double launch with no crash at all. mark_done now rides out the blip."""
    await materialize(kit)
    kit.faults.fail_at("outbox.apply_claimed[done]", times=2)
    assert (await kit.worker().tick_any()).done == 1
    kit.clock.advance(100)
    assert (await kit.worker().tick_any()).claimed == 0
    assert len(kit.launcher.launches) == 1


async def test_store_blip_on_mark_retry_does_not_stop_the_batch(kit: Kit) -> None:
    await materialize(kit, n=2)
    kit.launcher.fail = always_fail
    kit.faults.fail_at("outbox.apply_claimed[retry]")  # the first row's failure cannot be recorded
    res = await kit.worker(lease_seconds=10).tick_any()
    assert (res.claimed, res.unrecorded, res.retried) == (2, 1, 1)  # the second row still ran
    kit.clock.advance(11)
    kit.launcher.fail = None
    res = await kit.worker(lease_seconds=10).tick_any()
    assert res.done == 2  # the unrecorded one was reclaimed after its lease
    rows = {r.seq: r for r in await kit.rows(T)}
    assert rows[1].attempts == 1 and rows[1].errors[-1].kind == "lease_expired"
