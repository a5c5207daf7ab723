"""The completeness audit (A1) and the replays under the current rules (A4), on every backend
(memory, mongomock, the wire): a row deleted behind the service's back is found by seq and
repaired once; planted orphans are reported with their reason; a row owed for an event older
than the done TTL is presumed expired, never missing or repaired; a replay plans rows under the
current subscriptions, writes only those not stored, and a dry run writes nothing."""

from __future__ import annotations

import pytest

from board_outbox.engine.audit import Auditor, AuditSettings, BackgroundAudit
from board_outbox.engine.replay import replay_range
from board_outbox.engine.tail import Tail
from board_outbox.model.domain import DONE_TTL_SECONDS, MatchRule, Subscription
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
