"""Issue 33: pause / resume per tenant, subscription or bot. The ``PauseStore`` contract and the
outbox's ``release_held`` on every backend (memory twins, mongomock, the wire), and the worker
holding a paused row without spending an attempt, then running it in its order after resume."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from board_outbox.engine.flow.limits import LimitSettings
from board_outbox.engine.flow.pause import RELEASE_SWEEP_SECONDS, PauseGate
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.engine.work.outcomes import TickResult
from board_outbox.engine.work.worker import EffectWorker
from board_outbox.model import transitions as T
from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.limits import bot_key
from board_outbox.model.pause import AUDIT_KEEP, HELD_OFFSET, PAUSES_COLLECTION, reason_of
from board_outbox.model.rows import DONE, PENDING, EffectRow
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import PauseStore
from board_outbox.service.health import tenant_statuses
from board_outbox.service.runtime import build_registry
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

T1, T2 = "t1", "t2"
EVERY = 2.0  # the gate's heartbeat in these tests


def _pauses(kit: Kit) -> PauseStore:
    assert kit.pauses is not None
    return kit.pauses


def _gate(kit: Kit) -> PauseGate:
    return PauseGate(_pauses(kit), kit.outbox, kit.clock, every=EVERY)


def _worker(kit: Kit, gate: PauseGate, **limits: Any) -> EffectWorker:
    """The service's wiring: the worker checks tenant and subscription, the launch handler the
    bot (``build_registry(pause=)``)."""
    registry = build_registry(kit.stores, ["board-reflect"], limits=LimitSettings(**limits),
                              pause=gate)
    worker = kit.worker(registry)
    worker.pause = gate
    worker.metrics = Metrics()
    return worker


async def _rows(kit: Kit, sub: Subscription, n: int) -> None:
    """``n`` events on a card the subscription matches: one launch row and one projection row
    each (board-reflect), in seq order."""
    await kit.sub(sub)
    await kit.card(sub.tenant_id, "c")
    for _ in range(n):
        await kit.emit(sub.tenant_id, "card.updated", "c")
    await kit.tail(projections=("board-reflect",), seed="earliest").drain_tenant(sub.tenant_id)


async def _drain(worker: EffectWorker) -> TickResult:
    """Ticks until a claim comes back empty (the claim size adapts to the backlog)."""
    total = TickResult()
    while (res := await worker.tick_any()).claimed:
        total.add(res)
    return total


def _launches(kit: Kit, tenant: str | None = None) -> list[tuple[str, int]]:
    return [(r.sub_id, r.seq) for r in kit.launcher.launches
            if tenant is None or r.tenant_id == tenant]


def _held(rows: list[EffectRow]) -> list[EffectRow]:
    return [r for r in rows if r.state == PENDING and r.not_before >= HELD_OFFSET]


def _paused_rows(metrics: Metrics | None) -> dict[str, float]:
    assert metrics is not None
    return {s.labels["scope"]: s.value for fam in metrics.prom.registry.collect()
            for s in fam.samples if s.name == "board_outbox_paused_rows_total"}


# --- the store contract ---------------------------------------------------------------------


async def test_pause_resume_and_the_audit_of_both(kit: Kit) -> None:
    store, now = _pauses(kit), kit.clock.now()
    assert await store.all() == []
    assert await store.pause("tenant", T1, reason="runaway bot", by="ana", at=now)
    assert not await store.pause("tenant", T1, reason="still running away", by="bo", at=now + 1)
    assert await store.pause("bot", "deploy bot", reason="", by="ana", at=now + 2)
    [bot, tenant] = sorted(await store.all(), key=lambda p: p.scope)
    assert (tenant.scope, tenant.key, tenant.active) == ("tenant", T1, True)
    assert (tenant.reason, tenant.by, tenant.at) == ("still running away", "bo", now + 1)
    assert [(a.action, a.by, a.detail) for a in tenant.audit] == [
        ("pause", "ana", "runaway bot"), ("pause", "bo", "still running away")]
    assert tenant.holds == reason_of("tenant", T1) == f"paused: tenant {T1}"
    assert (bot.key, bot.active) == ("deploy bot", True)

    assert await store.resume("tenant", T1, by="cy", at=now + 3)
    assert not await store.resume("tenant", T1, by="cy", at=now + 4)  # not paused: nothing
    assert not await store.resume("subscription", "never", by="cy", at=now + 4)
    [tenant] = [p for p in await store.all() if p.scope == "tenant"]
    assert not tenant.active and tenant.reason == "still running away"  # kept: the history
    assert [(a.action, a.by, a.at) for a in tenant.audit][-1] == ("resume", "cy", now + 3)
    assert await store.pause("tenant", T1, reason="again", by="ana", at=now + 5)  # on again
    [tenant] = [p for p in await store.all() if p.scope == "tenant"]
    assert tenant.active and [a.action for a in tenant.audit] == ["pause", "pause", "resume",
                                                                  "pause"]


async def test_a_pause_keeps_only_its_newest_audit_entries(kit: Kit) -> None:
    store, now = _pauses(kit), kit.clock.now()
    for i in range(AUDIT_KEEP + 5):
        await store.pause("subscription", "s1", reason=f"r{i}", by="ana", at=now + i)
    [p] = await store.all()
    assert len(p.audit) == AUDIT_KEEP and p.audit[-1].detail == f"r{AUDIT_KEEP + 4}"
    assert p.audit[0].detail == "r5"


BAD_PAUSES: list[tuple[str, dict[str, Any]]] = [
    ("galaxy:x", {"scope": "galaxy", "key": "x", "active": True, "at": 1.0}),  # unknown scope
    ("tenant:a/b", {"scope": "tenant", "key": "a/b", "active": True, "at": 1.0}),  # not an id
    ("tenant:t9", {"scope": "tenant", "key": "t9", "active": "yes", "at": 1.0}),
    ("tenant:t8", {"scope": "tenant", "key": "t8", "active": True, "at": "monday"}),
    ("tenant:t7", {"scope": "tenant", "key": "t7", "active": True, "at": float("nan")}),
    ("tenant:t6", {"scope": "tenant", "key": "t6", "active": True, "at": 1.0, "reason": 42}),
    ("tenant:t5", {"scope": "tenant", "key": "t5", "active": True, "at": 1.0, "audit": "x"}),
    ("tenant:t4", {"scope": "tenant", "key": "t4", "active": True, "at": 1.0,
                   "audit": [{"at": 1.0, "action": "pause", "by": "old"},
                             {"at": "then", "action": 1}]}),
    ("tenant:other", {"scope": "tenant", "key": "t3", "active": True, "at": 1.0}),  # wrong _id
    ("bot:", {"scope": "bot", "key": "", "active": True, "at": 1.0}),
    ("subscription:s9", {"scope": "subscription", "key": ["s9"], "active": True, "at": 1.0}),
]


async def test_a_bad_pause_document_costs_only_itself(kit: Kit,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """R1: each malformed pause document is left out and reported once; it pauses nothing, and
    the good pauses beside it stand."""
    assert kit.put_raw_pause is not None
    store, now = _pauses(kit), kit.clock.now()
    await store.pause("tenant", T1, reason="ok", by="ana", at=now)
    for doc_id, doc in BAD_PAUSES:
        await kit.put_raw_pause(doc_id, doc)
    caplog.set_level(logging.WARNING, logger="board_outbox.documents")
    assert [(p.scope, p.key) for p in await store.all()] == [("tenant", T1)]
    bad = {d.key for d in BAD_DOCUMENTS.current() if d.collection == PAUSES_COLLECTION}
    assert {doc_id for doc_id, _ in BAD_PAUSES} <= bad
    reported = len([r for r in caplog.records if PAUSES_COLLECTION in r.getMessage()])
    assert [(p.scope, p.key) for p in await store.all()] == [("tenant", T1)]
    # once each (the process's log, across backends too), not once per read
    assert len([r for r in caplog.records if PAUSES_COLLECTION in r.getMessage()]) == reported

    # pausing a key whose document is bad writes it whole again: it parses, and is on
    assert await store.pause("tenant", "t5", reason="fixed", by="ana", at=now + 1)
    assert await store.pause("tenant", "t9", reason="fixed", by="ana", at=now + 1)
    assert await store.pause("tenant", "t4", reason="fixed", by="ana", at=now + 1)
    on = {(p.key, p.active) for p in await store.all()}
    assert {("t4", True), ("t5", True), ("t9", True), (T1, True)} <= on
    assert not {"tenant:t4", "tenant:t5", "tenant:t9"} & {
        d.key for d in BAD_DOCUMENTS.current() if d.collection == PAUSES_COLLECTION}
    [t4] = [p for p in await store.all() if p.key == "t4"]
    assert [(a.by, a.detail) for a in t4.audit] == [("old", ""), ("ana", "fixed")]  # good kept
    # a bad document is never "paused": resume leaves it alone
    assert not await store.resume("tenant", "t8", by="ana", at=now + 2)


# --- release_held ---------------------------------------------------------------------------


async def test_release_held_gives_rows_back_their_own_time_and_nothing_else(kit: Kit) -> None:
    sub = Subscription(sub_id="s1", tenant_id=T1, bot="b")
    await _rows(kit, sub, 4)
    claims = await kit.outbox.claim_any(kit.clock.now(), 30.0, 100, tenants=[T1])
    launches = sorted((c for c in claims if c.row is not None and c.row.sub_id),
                      key=lambda c: c.row.seq if c.row else 0)
    assert len(launches) == 4
    before = {c.row.row_key: c.row.not_before for c in launches if c.row}
    now = kit.clock.now()
    why = {0: reason_of("tenant", T1), 1: reason_of("subscription", "s1"),
           2: reason_of("tenant", T1)}
    for i, c in enumerate(launches):
        assert c.row is not None
        if i in why:  # held as the worker holds it
            t = T.defer(now=now, not_before=c.row.not_before + HELD_OFFSET, reason=why[i])
        else:  # a row deferred over a limit: not held, never released
            t = T.defer(now=now, not_before=now + 5, reason="bot limit (in_flight) of x")
        assert await kit.outbox.apply_claimed(c.ref, c.claim_id, t)
    assert len(_held(await kit.rows(T1))) == 3

    # the subscription's pause is lifted, the tenant's is still on
    moved = await kit.outbox.release_held(now + 1, keep=[reason_of("tenant", T1)])
    assert moved == 1
    rows = {r.row_key: r for r in await kit.rows(T1) if r.sub_id}
    released = rows[launches[1].row.row_key]  # type: ignore[union-attr]
    assert released.not_before == pytest.approx(before[released.row_key], abs=1e-5)
    assert released.waiting is None and released.attempts == 0
    assert len(_held(list(rows.values()))) == 2
    assert await kit.outbox.release_held(now + 2, keep=[reason_of("tenant", T1)]) == 0
    assert await kit.outbox.release_held(now + 2, keep=[]) == 2
    rows = {r.row_key: r for r in await kit.rows(T1) if r.sub_id}
    assert _held(list(rows.values())) == []
    for key, nb in before.items():
        if rows[key].waiting is None:  # the three held ones: their own time, to the microsecond
            assert rows[key].not_before == pytest.approx(nb, abs=1e-5)
    assert [r.waiting for r in rows.values()].count("bot limit (in_flight) of x") == 1


async def test_release_held_leaves_rows_it_did_not_hold_alone(kit: Kit) -> None:
    """A row far in the future without a reason, or a done row with a reason, is not a held row."""
    far = {"tenant_id": T1, "seq": 1, "row_key": "t1/1/sub/x", "state": PENDING,
           "not_before": HELD_OFFSET + 5.0, "kind": "launch", "sub_id": "x", "waiting": None}
    done = {**far, "seq": 2, "row_key": "t1/2/sub/x", "state": DONE, "waiting": "paused: tenant t1"}
    await kit.insert_raw_row(far)
    await kit.insert_raw_row(done)
    assert await kit.outbox.release_held(kit.clock.now(), keep=[]) == 0
    assert (await kit.raw_row("t1/1/sub/x") or {})["not_before"] == HELD_OFFSET + 5.0


# --- the worker -----------------------------------------------------------------------------


async def test_a_paused_tenants_rows_are_held_then_run_in_order_after_resume(kit: Kit) -> None:
    await _rows(kit, Subscription(sub_id="s1", tenant_id=T1, bot="b"), 5)
    await _rows(kit, Subscription(sub_id="s2", tenant_id=T2, bot="b"), 2)
    gate = _gate(kit)
    await _pauses(kit).pause("tenant", T1, reason="incident 42", by="ana", at=kit.clock.now())
    assert await gate.refresh()
    worker = _worker(kit, gate)
    res = await _drain(worker)
    assert res.held == 5 and res.failed == 0 and res.retried == 0
    # the other tenant runs, and the paused tenant's projection rows run (not held)
    assert _launches(kit) == [("s2", 1), ("s2", 2)]
    rows = await kit.rows(T1)
    held = _held(rows)
    assert len(held) == 5 and all(r.sub_id == "s1" for r in held)
    assert all(r.attempts == 0 and r.errors == [] and r.waiting == f"paused: tenant {T1}"
               for r in held)
    assert all(r.state == DONE for r in rows if r.projection)
    assert _paused_rows(worker.metrics) == {"tenant": 5.0}
    stores = kit.stores
    stores.status = kit.status_store
    st = (await tenant_statuses(stores, kit.clock.now()))[T1]
    assert (st.held_by_pause, st.waiting_on_limit) == (5, 0)

    # no churn: while the pause lasts, no claim picks the held rows again
    for _ in range(3):
        kit.clock.advance(EVERY)
        await gate.refresh()
        assert (await worker.tick_any()).claimed == 0

    assert await _pauses(kit).resume("tenant", T1, by="ana", at=kit.clock.now())
    assert (await worker.tick_any()).claimed == 0  # not read yet: within one heartbeat
    kit.clock.advance(EVERY)
    assert await gate.refresh()
    res = await _drain(worker)
    assert res.done == 5 and res.held == 0
    assert _launches(kit, T1) == [("s1", seq) for seq in range(1, 6)]  # in their order
    rows = [r for r in await kit.rows(T1) if r.sub_id]
    assert all(r.state == DONE and r.attempts == 0 and r.waiting is None for r in rows)


async def test_a_released_row_is_due_again_at_its_own_time(kit: Kit) -> None:
    """The worker holds a row by setting its own ``not_before`` aside, not the hold's instant:
    released, each row is due at the time it had (rows due 5 s apart, held 30 s later), so it
    keeps its place among its tenant's rows."""
    await kit.sub(Subscription(sub_id="s1", tenant_id=T1, bot="b"))
    await kit.card(T1, "c")
    tail = kit.tail(seed="earliest")
    for _ in range(3):
        await kit.emit(T1, "card.updated", "c")
        await tail.drain_tenant(T1)
        kit.clock.advance(5.0)
    before = {r.row_key: r.not_before for r in await kit.rows(T1)}
    assert len(set(before.values())) == 3  # three distinct due times
    kit.clock.advance(30.0)
    gate = _gate(kit)
    await _pauses(kit).pause("tenant", T1, reason="", by="ana", at=kit.clock.now())
    await gate.refresh()
    assert (await _drain(_worker(kit, gate))).held == 3
    held = {r.row_key: r.not_before for r in _held(await kit.rows(T1))}
    assert held == pytest.approx({k: nb + HELD_OFFSET for k, nb in before.items()}, abs=1e-5)
    await _pauses(kit).resume("tenant", T1, by="ana", at=kit.clock.now())
    kit.clock.advance(EVERY)
    await gate.refresh()
    after = {r.row_key: r.not_before for r in await kit.rows(T1)}
    assert after == pytest.approx(before, abs=1e-5)


async def test_a_paused_subscription_holds_only_its_rows(kit: Kit) -> None:
    await _rows(kit, Subscription(sub_id="s1", tenant_id=T1, bot="b"), 2)
    await kit.sub(Subscription(sub_id="s3", tenant_id=T1, bot="b"))
    await kit.emit(T1, "card.updated", "c")
    await kit.tail(projections=("board-reflect",)).drain_tenant(T1)
    gate = _gate(kit)
    await _pauses(kit).pause("subscription", "s1", reason="", by="ana", at=kit.clock.now())
    await gate.refresh()
    worker = _worker(kit, gate)
    res = await _drain(worker)
    assert res.held == 3  # s1's rows of seq 1..3
    assert _launches(kit) == [("s3", 3)]
    assert {r.waiting for r in _held(await kit.rows(T1))} == {"paused: subscription s1"}


async def test_a_paused_bot_is_held_before_its_limits_are_taken(kit: Kit) -> None:
    """The bot is checked in the launch handler, after the re-checks and before the limits:
    a held launch takes no in-flight slot and spends no one-shot label."""
    sub = Subscription(sub_id="s1", tenant_id=T1, bot="deploy bot", consume_labels=("go",))
    await kit.sub(sub)
    await kit.sub(Subscription(sub_id="s2", tenant_id=T2, bot="deploy bot"))
    await kit.sub(Subscription(sub_id="s3", tenant_id=T2, bot="other"))
    await kit.card(T1, "c", labels=("go",))
    await kit.card(T2, "c")
    await kit.emit(T1, "card.updated", "c")
    await kit.emit(T2, "card.updated", "c")
    for t in (T1, T2):
        await kit.tail(seed="earliest").drain_tenant(t)
    gate = _gate(kit)
    await _pauses(kit).pause("bot", "deploy bot", reason="bad deploy", by="ana",
                             at=kit.clock.now())
    await gate.refresh()
    worker = _worker(kit, gate, bot_in_flight=1)
    res = await _drain(worker)
    assert (res.held, res.done) == (2, 1)  # the bot's launches in both tenants; s3 ran
    assert _launches(kit) == [("s3", 1)]
    assert (await kit.cards.get(T1, "c")).labels == ("go",)  # nothing spent
    assert kit.limits is not None
    assert await kit.limits.acquire(bot_key(T1, "deploy bot"), 1, "probe",
                                    until=kit.clock.now() + 60, now=kit.clock.now())
    await kit.limits.release(bot_key(T1, "deploy bot"), "probe")
    assert _paused_rows(worker.metrics) == {"bot": 2.0}

    await _pauses(kit).resume("bot", "deploy bot", by="ana", at=kit.clock.now())
    kit.clock.advance(EVERY)
    await gate.refresh()
    assert (await _drain(worker)).done == 2
    assert sorted(_launches(kit)) == [("s1", 1), ("s2", 1), ("s3", 1)]


async def test_the_pause_set_is_read_at_most_once_per_heartbeat(kit: Kit) -> None:
    gate = _gate(kit)
    assert await gate.refresh()
    for _ in range(5):
        assert not await gate.refresh()
    kit.clock.advance(EVERY - 0.01)
    assert not await gate.refresh()
    kit.clock.advance(0.01)
    assert await gate.refresh()
    assert gate.reads == 2


async def test_a_hold_that_lands_after_the_lift_is_released_by_the_next_read(kit: Kit) -> None:
    """A replica decided to hold a row before its read found the pause lifted, and the hold's
    write landed after that read's release: the next read releases it again."""
    await _rows(kit, Subscription(sub_id="s1", tenant_id=T1, bot="b"), 1)
    gate = _gate(kit)
    await _pauses(kit).pause("tenant", T1, reason="", by="ana", at=kit.clock.now())
    await gate.refresh()
    [claim] = [c for c in await kit.outbox.claim_any(kit.clock.now(), 30.0, 10) if c.row and
               c.row.sub_id]
    assert claim.row is not None
    await _pauses(kit).resume("tenant", T1, by="ana", at=kit.clock.now())
    kit.clock.advance(EVERY)
    assert await gate.refresh()  # finds it lifted, releases (nothing held yet)
    late = T.defer(now=kit.clock.now(), not_before=claim.row.not_before + HELD_OFFSET,
                   reason=reason_of("tenant", T1))
    assert await kit.outbox.apply_claimed(claim.ref, claim.claim_id, late)  # the late hold
    assert len(_held(await kit.rows(T1))) == 1
    kit.clock.advance(EVERY)
    assert await gate.refresh()
    assert _held(await kit.rows(T1)) == []


async def test_the_sweep_releases_rows_a_dead_replica_held_for_a_pause_lifted_since(
        kit: Kit) -> None:
    """A replica that never saw the pause on finds its held rows on its periodic sweep."""
    await _rows(kit, Subscription(sub_id="s1", tenant_id=T1, bot="b"), 2)
    dead = _gate(kit)
    await _pauses(kit).pause("tenant", T1, reason="", by="ana", at=kit.clock.now())
    await dead.refresh()
    assert (await _drain(_worker(kit, dead))).held == 2
    await _pauses(kit).resume("tenant", T1, by="ana", at=kit.clock.now())
    fresh = _gate(kit)  # started after the resume: nothing was lifted in its view
    kit.clock.advance(1.0)
    await fresh.refresh()  # its first read sweeps
    assert _held(await kit.rows(T1)) == []
    # the next sweep is RELEASE_SWEEP_SECONDS later
    await _pauses(kit).pause("tenant", T1, reason="", by="ana", at=kit.clock.now())
    assert (await _drain(_worker(kit, dead))).held == 2  # the dead one's view: still on
    await _pauses(kit).resume("tenant", T1, by="ana", at=kit.clock.now())
    kit.clock.advance(EVERY)
    await fresh.refresh()
    assert len(_held(await kit.rows(T1))) == 2  # not swept yet
    kit.clock.advance(RELEASE_SWEEP_SECONDS)
    await fresh.refresh()
    assert _held(await kit.rows(T1)) == []


async def test_a_bad_pause_document_pauses_and_unpauses_nothing_else(kit: Kit) -> None:
    assert kit.put_raw_pause is not None
    await _rows(kit, Subscription(sub_id="s1", tenant_id=T1, bot="b"), 1)
    await _rows(kit, Subscription(sub_id="s2", tenant_id=T2, bot="b"), 1)
    await _pauses(kit).pause("tenant", T1, reason="", by="ana", at=kit.clock.now())
    # a hand-edited copy of a pause of T2 with a bad field, and garbage beside it
    await kit.put_raw_pause("tenant:t2", {"scope": "tenant", "key": T2, "active": 1, "at": 0})
    await kit.put_raw_pause("x", {"scope": None})
    gate = _gate(kit)
    await gate.refresh()
    assert gate.by_scope() == {"tenant": 1, "subscription": 0, "bot": 0}
    res = await _drain(_worker(kit, gate))
    assert res.held == 1 and _launches(kit) == [("s2", 1)]
