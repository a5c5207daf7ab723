"""The completeness audit (A1) and the replays under the current rules (A4), on every backend
(memory, mongomock, the wire): a row deleted behind the service's back is found by seq and
repaired once; planted orphans are reported with their reason; a row owed for an event older
than the done TTL is presumed expired, never missing or repaired; a replay plans rows under the
current subscriptions, writes only those not stored, and a dry run writes nothing."""

from __future__ import annotations

import pytest

from board_outbox.engine.tail.tail import Tail
from board_outbox.engine.upkeep.audit import Auditor, AuditSettings, BackgroundAudit
from board_outbox.engine.upkeep.replay import replay_range
from board_outbox.model.rows import DONE_TTL_SECONDS
from board_outbox.model.subscriptions import MatchRule, Subscription
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

T = "t1"
PROJ = ("board-reflect",)


async def _materialized(kit: Kit, n: int = 6) -> Tail:
    """n events of tenant t1 (a launch subscription on card.created), drained by a tail with the
    board-reflect projection: 2 launch rows and n projection rows."""
    await kit.card(T, "c")
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="b",
                               rule=MatchRule(event_types=("card.created",))))
    for i in range(n):
        await kit.emit(T, "card.created" if i % 3 == 0 else "card.updated", "c")
    tail = kit.tail(PROJ, seed="earliest", batch_size=4)
    await tail.drain_all([T])
    assert await kit.cursors.get(T) == n
    return tail


async def test_a_row_deleted_behind_the_service_is_found_and_repaired_once(kit: Kit) -> None:
    tail = await _materialized(kit)
    auditor = Auditor(tail, batch_size=4)
    clean = await auditor.audit(T)
    assert (clean.events, clean.rows_checked, clean.missing, clean.orphaned) == (6, 8, [], [])
    assert clean.upto == 6 and clean.complete
    assert kit.delete_raw_row is not None
    await kit.delete_raw_row(f"{T}/5/proj/board-reflect")
    rep = await auditor.audit(T)
    assert [(f.seq, f.row_key, f.reason) for f in rep.missing] == [
        (5, f"{T}/5/proj/board-reflect", "missing")]
    assert rep.orphaned == [] and rep.repaired == 0
    # --since skips it
    assert (await auditor.audit(T, after=5)).missing == []
    fixed = await auditor.audit(T, repair=True)
    assert fixed.repaired == 1
    row = await kit.outbox.get(f"{T}/5/proj/board-reflect")
    assert row is not None and row.state == "pending" and row.projection == "board-reflect"
    again = await auditor.audit(T, repair=True)
    assert again.missing == [] and again.repaired == 0
    assert len(await kit.rows(T)) == 8


async def test_planted_orphans_are_reported_with_their_reason(kit: Kit) -> None:
    await kit.card(T, "c")
    for _ in range(2):
        await kit.emit(T, "card.updated", "c")
    await kit.events.allocate_seq(T)  # seq 3: allocated, never inserted (a dead allocation)
    for _ in range(2):
        await kit.emit(T, "card.updated", "c")
    tail = kit.tail(PROJ, seed="earliest", young_gap_seconds=30)
    await tail.drain_all([T])
    kit.clock.advance(31)  # the gap is old now: stepped over
    await tail.drain_all([T])
    assert await kit.cursors.get(T) == 5
    base = {"tenant_id": T, "state": "done", "attempts": 0, "created_at": kit.clock.now(),
            "updated_at": kit.clock.now(), "not_before": 0.0}
    await kit.insert_raw_row({**base, "row_key": f"{T}/3/proj/board-reflect", "seq": 3,
                              "kind": "projection", "projection": "board-reflect"})
    await kit.insert_raw_row({**base, "row_key": f"{T}/2/sub/ghost", "seq": 2, "kind": "launch",
                              "sub_id": "ghost"})
    await kit.insert_raw_row({**base, "row_key": f"{T}/4/proj/gone", "seq": 4,
                              "kind": "projection", "projection": "gone"})
    await kit.insert_raw_row({**base, "row_key": f"{T}/9/sub/ghost", "seq": 9, "kind": "launch",
                              "sub_id": "ghost"})  # past the cursor: not audited yet
    await kit.insert_raw_row({**base, "row_key": 42, "seq": "x"})  # names no event at all
    rep = await Auditor(tail, batch_size=2).audit(T)
    assert rep.missing == []
    assert sorted((f.seq, f.row_key, f.reason) for f in rep.orphaned) == [
        (2, f"{T}/2/sub/ghost", "no subscription"),
        (3, f"{T}/3/proj/board-reflect", "no event"),
        (4, f"{T}/4/proj/gone", "projection not enabled"),
    ]


async def test_a_row_owed_for_an_event_older_than_the_ttl_is_presumed_expired(kit: Kit) -> None:
    tail = await _materialized(kit, n=3)
    assert kit.delete_raw_row is not None
    await kit.delete_raw_row(f"{T}/2/proj/board-reflect")
    kit.clock.advance(DONE_TTL_SECONDS + 1)
    rep = await Auditor(tail).audit(T, repair=True)
    assert rep.missing == [] and rep.presumed_expired == 1 and rep.repaired == 0
    assert await kit.outbox.get(f"{T}/2/proj/board-reflect") is None


async def test_background_audit_is_bounded_finds_old_deletions_and_forgets_repairs(kit: Kit) -> None:
    tail = await _materialized(kit, n=6)
    bg = BackgroundAudit(Auditor(tail, batch_size=2), AuditSettings(batch_events=4))
    cursors = {T: 6}
    await bg.tick(cursors)
    assert bg.head[T] == 4 and bg.events_audited == 4  # bounded: 4 events per pass
    await bg.tick(cursors)  # the head's 2 new events, then the sweep: seqs 1-2
    assert bg.head[T] == 6 and bg.sweep[T] == 2 and bg.events_audited == 8
    assert bg.missing_rows() == {T: 0}
    assert kit.delete_raw_row is not None
    await kit.delete_raw_row(f"{T}/1/proj/board-reflect")  # long after seq 1 was audited
    await bg.tick(cursors)  # nothing new at the head; the sweep: seqs 3-6, then it starts over
    assert bg.sweep[T] == 0 and bg.missing_rows() == {T: 0}
    await bg.tick(cursors)  # the sweep from seq 1 again
    assert bg.missing_rows() == {T: 1}
    await Auditor(tail).audit(T, repair=True)
    await bg.tick(cursors)
    assert bg.missing_rows() == {T: 0}


async def test_background_audit_shares_one_budget_across_tenants(kit: Kit) -> None:
    await kit.card("t2", "c")
    for _ in range(3):
        await kit.emit("t2", "card.updated", "c")
    tail = await _materialized(kit, n=6)
    await tail.drain_all(["t2"])
    bg = BackgroundAudit(Auditor(tail, batch_size=2), AuditSettings(batch_events=4))
    cursors = {T: 6, "t2": 3}
    seen = []
    for _ in range(6):
        before = bg.events_audited
        await bg.tick(cursors)
        seen.append(bg.events_audited - before)
    assert all(n <= 4 for n in seen) and sum(seen) == 24  # never more than the budget per pass
    assert bg.head == {T: 6, "t2": 3}
    assert kit.delete_raw_row is not None
    await kit.delete_raw_row("t2/3/proj/board-reflect")
    for _ in range(4):  # one sweep round over both tenants (9 events) fits in 3 passes
        await bg.tick(cursors)
    assert bg.missing_rows() == {T: 0, "t2": 1}
    idle = bg.events_audited
    await bg.tick({})  # no tenant owned: nothing audited
    assert bg.events_audited == idle


async def test_replay_plans_under_the_current_rules_and_writes_only_what_is_not_stored(kit: Kit) -> None:
    tail = await _materialized(kit, n=6)  # launch rows for seqs 1 and 4 (card.created)
    # a subscription added later: the current rules say it wants every card.updated event
    await kit.sub(Subscription(sub_id="late", tenant_id=T, bot="late-bot",
                               rule=MatchRule(event_types=("card.updated",))))
    await kit.outbox.upsert_rows([])  # no-op write on every backend
    before = len(await kit.rows(T))
    dry = await replay_range(tail, T, since=3, dry_run=True, batch_size=2)
    fire = sorted(r.row_key for r in dry.rows if r.action == "fire")
    assert fire == [f"{T}/{s}/sub/late" for s in (3, 5, 6)]
    assert {r.action for r in dry.rows if r.row_key.endswith("/sub/s")} == {"queued"}
    assert dry.written == 0 and len(await kit.rows(T)) == before
    only = await replay_range(tail, T, since=1, subscription="s", dry_run=True)
    assert sorted(r.row_key for r in only.rows) == [f"{T}/1/sub/s", f"{T}/4/sub/s"]
    done = await replay_range(tail, T, since=3, dry_run=False, batch_size=2)
    assert done.written == 3
    late = await kit.outbox.get(f"{T}/5/sub/late")
    assert late is not None and late.state == "pending" and late.sub_id == "late"
    assert len(await kit.rows(T)) == before + 3
    twice = await replay_range(tail, T, since=3, dry_run=False)
    assert twice.written == 0 and twice.count("fire") == 0 and twice.count("queued") >= 3


async def test_the_sweep_visits_a_bounded_number_of_tenants_per_pass(kit: Kit) -> None:
    tenants = [f"t{i}" for i in range(5)]
    for t in tenants:
        await kit.card(t, "c")
        await kit.emit(t, "card.updated", "c")
    tail = kit.tail(PROJ, seed="earliest")
    await tail.drain_all(tenants)
    bg = BackgroundAudit(Auditor(tail), AuditSettings(batch_events=100, sweep_tenants_per_pass=2))
    cursors = dict.fromkeys(tenants, 1)
    await bg.tick(cursors)  # every head (5 events), then the sweep: 2 tenants
    assert bg.events_audited == 5 + 2 and bg.sweeping == "t2"
    await bg.tick(cursors)  # nothing new: the sweep only, the next 2 tenants
    assert bg.events_audited == 9 and bg.sweeping == "t4"
    assert kit.delete_raw_row is not None
    await kit.delete_raw_row("t0/1/proj/board-reflect")
    await bg.tick(cursors)  # t4, then round again to t0
    assert bg.sweeping == "t1" and bg.missing_rows()["t0"] == 1


# --- issue 32: the cursor bound, events without a time, repairs of a mixed range ------------------


async def test_the_audit_and_a_replay_never_read_past_the_cursor(kit: Kit) -> None:
    """Events past the cursor are the tail's to materialize: they have no rows yet and are not
    missing; a replay plans nothing for them. The chunks' sizes are chosen so one read reaches
    past the cursor."""
    tail = await _materialized(kit, n=5)
    for _ in range(4):  # seqs 6..9: inserted, not drained
        await kit.emit(T, "card.created", "c")
    assert await kit.cursors.get(T) == 5
    for batch in (2, 3, 4, 500):
        rep = await Auditor(tail, batch_size=batch).audit(T, repair=True)
        assert (rep.upto, rep.cursor, rep.events) == (5, 5, 5), batch
        assert rep.missing == [] and rep.repaired == 0 and rep.orphaned == []
        plan = await replay_range(tail, T, since=1, dry_run=False, batch_size=batch)
        assert plan.upto == 5 and max(r.seq for r in plan.rows) == 5 and plan.written == 0
    assert all(r.seq <= 5 for r in await kit.rows(T))


async def test_an_event_without_a_time_owes_no_repair(kit: Kit) -> None:
    """An event with no ``at`` (or ``at`` 0) cannot say its rows are younger than the done TTL:
    a row owed for it may have run and expired, so it is presumed expired, never missing, never
    re-created by ``--repair`` or a replay (re-creating it could run its effect twice)."""
    await kit.card(T, "c")
    for seq, extra in ((1, {}), (2, {"at": 0}), (3, {"at": 0.0})):
        seq_ = await kit.events.allocate_seq(T)
        assert seq_ == seq
        await kit.insert_raw_event({"tenant_id": T, "seq": seq, "type": "card.updated",
                                    "card_id": "c", **extra})
    tail = kit.tail(PROJ, seed="earliest")
    await tail.drain_all([T])
    assert await kit.cursors.get(T) == 3 and len(await kit.rows(T)) == 3
    assert kit.delete_raw_row is not None
    for seq in (1, 2, 3):
        await kit.delete_raw_row(f"{T}/{seq}/proj/board-reflect")
    rep = await Auditor(tail).audit(T, repair=True)
    assert rep.missing == [] and rep.presumed_expired == 3 and rep.repaired == 0
    plan = await replay_range(tail, T, since=1, dry_run=False)
    assert {r.action for r in plan.rows} == {"maybe-expired"} and plan.written == 0
    assert await kit.rows(T) == []


async def test_repair_rewrites_only_the_missing_rows_of_a_mixed_range(kit: Kit) -> None:
    """Seqs 1-3 are older than the done TTL (their rows deleted: expired), 4-6 young with their
    rows deleted (missing), 7-8 young with their rows done: ``--repair`` writes exactly the
    missing rows, pending; the expired stay absent and the done stay done, untouched."""
    await kit.card(T, "c")
    for _ in range(3):
        await kit.emit(T, "card.updated", "c")
    kit.clock.advance(DONE_TTL_SECONDS + 100)
    for _ in range(5):
        await kit.emit(T, "card.updated", "c")
    tail = kit.tail(PROJ, seed="earliest")
    await tail.drain_all([T])
    assert await kit.cursors.get(T) == 8
    worker = kit.worker(registry=kit.registry(list(PROJ)))
    assert (await worker.tick_any()).done == 8
    before = {r.row_key: r for r in await kit.rows(T)}
    assert kit.delete_raw_row is not None
    for seq in range(1, 7):
        await kit.delete_raw_row(f"{T}/{seq}/proj/board-reflect")
    for batch in (2, 500):  # a chunk may hold rows of every sort, or one sort only
        rep = await Auditor(tail, batch_size=batch).audit(T)
        assert sorted(f.seq for f in rep.missing) == [4, 5, 6] and rep.presumed_expired == 3
    rep = await Auditor(tail, batch_size=2).audit(T, repair=True)
    assert rep.repaired == 3
    rows = {r.row_key: r for r in await kit.rows(T)}
    assert sorted(r.seq for r in rows.values()) == [4, 5, 6, 7, 8]
    assert all(rows[f"{T}/{s}/proj/board-reflect"].state == "pending" for s in (4, 5, 6))
    for s in (7, 8):
        key = f"{T}/{s}/proj/board-reflect"
        assert rows[key].state == "done" and rows[key].done_at == before[key].done_at
        assert rows[key].attempts == before[key].attempts
    again = await Auditor(tail, batch_size=2).audit(T, repair=True)
    assert again.missing == [] and again.repaired == 0 and again.presumed_expired == 3
