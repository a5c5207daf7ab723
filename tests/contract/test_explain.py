"""Issue 33, item 4: ``explain`` names what holds a row, on every backend (memory twins,
mongomock, the wire). Each row is brought to its state by the real tail and worker (a limit's
slot held by someone else, a launcher that fails, a claim and a clock past its lease), then
explained; the timeline is checked against what the row and the event store recorded."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from board_outbox.engine.flow.limits import LimitSettings
from board_outbox.engine.flow.membership import owner
from board_outbox.engine.upkeep.explain import ExplainSettings, explain
from board_outbox.engine.work.worker import WorkerSettings
from board_outbox.model.errors import InvalidRowKey, RowNotFound
from board_outbox.model.explanation import (
    Backoff,
    Coalesced,
    DeadLettered,
    Done,
    ExpiredLease,
    Explanation,
    Lease,
    Limit,
    Malformed,
    NotDue,
    Ownership,
    Paused,
    Turn,
)
from board_outbox.model.limits import bot_key, rate_slot, tenant_key
from board_outbox.model.rows import CLAIMED, DONE, FAILED, PENDING
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import Stores
from board_outbox.service.runtime import build_registry
from board_outbox.surface.admin import replay_rows
from tests.support.kits import Kit, claim

pytestmark = pytest.mark.anyio

T = "t1"
KEY1 = f"{T}/1/sub/s1"


def _stores(kit: Kit) -> Stores:
    return dataclasses.replace(kit.stores, members=kit.members)


async def _explain(kit: Kit, key: str = KEY1, **settings: Any) -> Explanation:
    return await explain(_stores(kit), key, kit.clock.now(), ExplainSettings(**settings))


async def _rows(kit: Kit, sub: Subscription | None = None, n: int = 1) -> None:
    """``n`` events on ``n`` cards, materialized by the tail (one batch): pending rows."""
    sub = sub or Subscription(sub_id="s1", tenant_id=T, bot="b")
    await kit.sub(sub)
    for i in range(n):
        await kit.card(T, f"c{i}")
        await kit.emit(T, "card.created", f"c{i}")
    await kit.tail(seed="earliest").drain_tenant(T)


def _names(x: Explanation) -> list[str]:
    return [h.name for h in x.holds]


def _moments(x: Explanation) -> list[tuple[str, int | None]]:
    return [(m.what, m.attempt) for m in x.timeline]


async def test_a_done_row_is_done_and_its_timeline_runs_event_to_done(kit: Kit) -> None:
    emitted = kit.clock.now()
    await _rows(kit)
    kit.clock.advance(0.5)
    materialized = (await kit.outbox.get(KEY1)).materialized_at  # type: ignore[union-attr]
    kit.clock.advance(0.5)
    assert (await kit.worker().tick_any([T])).done == 1
    kit.clock.advance(3)
    x = await _explain(kit)
    assert _names(x) == ["done"]
    [done] = x.holds
    assert isinstance(done, Done) and done.outcome is not None and "launched" in done.outcome
    assert done.done_at == pytest.approx(emitted + 1.0, abs=1e-3)
    assert _moments(x) == [("event", None), ("materialized", None), ("done", None)]
    assert [m.at for m in x.timeline] == pytest.approx([emitted, materialized, emitted + 1.0],
                                                       abs=1e-3)
    assert x.row is not None and (x.row.state, x.row.tenant_id, x.row.target) == ("done", T, "s1")


async def test_a_dead_letter_names_its_last_error_and_the_replay(kit: Kit) -> None:
    await _rows(kit)
    kit.launcher.fail = lambda _r: True
    worker = kit.worker(max_attempts=2, backoff={"base_seconds": 1, "jitter": 0})
    await worker.tick_any([T])
    kit.clock.advance(5)
    await worker.tick_any([T])
    x = await _explain(kit, worker=WorkerSettings(max_attempts=2))
    assert _names(x) == ["failed"]
    [dl] = x.holds
    assert isinstance(dl, DeadLettered) and dl.attempts == 2
    assert dl.error is not None and dl.error in dl.summary
    assert dl.replay == f"board-outbox dead-letters replay {KEY1}"
    assert _moments(x) == [("event", None), ("materialized", None), ("attempt_failed", 1),
                           ("attempt_parked", 2), ("dead_lettered", None)]
    # replayed: the audit entry joins the timeline, and the row is due at once
    assert await replay_rows(kit.outbox, [KEY1], kit.clock, "ana") == [KEY1]
    kit.clock.advance(0.1)
    x = await _explain(kit)
    assert ("replay", None) in _moments(x) and "by ana" in x.timeline[-1].detail
    assert _names(x) == ["ownership", "turn"]  # no replica alive in this test, then its turn


async def test_a_retry_backs_off_until_its_not_before(kit: Kit) -> None:
    await _rows(kit)
    kit.launcher.fail = lambda _r: True
    await kit.worker(backoff={"base_seconds": 10, "jitter": 0}).tick_any([T])
    row = await kit.outbox.get(KEY1)
    assert row is not None and row.state == PENDING
    kit.clock.advance(2)
    x = await _explain(kit)
    assert _names(x) == ["backoff"]
    [b] = x.holds
    assert isinstance(b, Backoff) and b.until == row.not_before and b.after_attempt == 1
    assert b.error == row.errors[-1].error and "of 8" in b.summary
    assert ("attempt_failed", 1) in _moments(x)
    # once due it waits its turn instead
    kit.clock.advance(20)
    assert _names(await _explain(kit)) == ["ownership", "turn"]


async def test_a_claimed_row_holds_a_live_lease_then_an_expired_one(kit: Kit) -> None:
    await _rows(kit)
    [c] = await claim(kit.outbox, T, kit.clock.now(), 30.0, 10)
    kit.clock.advance(10)
    x = await _explain(kit)
    assert _names(x) == ["lease"]
    [lease] = x.holds
    assert isinstance(lease, Lease) and lease.claim_id == c.claim_id and lease.attempt == 1
    assert lease.until == pytest.approx(c.lease_until)
    assert ("claimed", 1) in _moments(x) and x.timeline[-1].at is None  # not recorded
    assert any("which replica" in n for n in x.notes)
    kit.clock.advance(25)  # past the lease
    x = await _explain(kit, worker=WorkerSettings(max_attempts=1))
    [gone] = x.holds
    assert isinstance(gone, ExpiredLease) and gone.claim_id == c.claim_id
    assert gone.expired_at == pytest.approx(c.lease_until)
    assert "stealable" in gone.summary and "dead-lettered then" in gone.summary
    row = await kit.outbox.get(KEY1)
    assert row is not None and row.state == CLAIMED  # explaining changed nothing


async def test_a_deferred_launch_names_its_limit_key_and_holders(kit: Kit) -> None:
    await _rows(kit, Subscription(sub_id="s1", tenant_id=T, bot="b", max_in_flight=1))
    assert kit.limits is not None
    now = kit.clock.now()
    assert await kit.limits.acquire(bot_key(T, "b"), 1, f"{T}/9/sub/s1:c9", until=now + 3600,
                                    now=now)
    assert (await kit.worker().tick_any([T])).deferred == 1
    row = await kit.outbox.get(KEY1)
    assert row is not None and row.waiting is not None
    x = await _explain(kit)
    assert _names(x) == ["limit"]
    [lim] = x.holds
    assert isinstance(lim, Limit)
    assert (lim.scope, lim.kind, lim.key, lim.limit, lim.used, lim.full) == (
        "bot", "in_flight", bot_key(T, "b"), 1.0, 1, True)
    assert [(h.holder, h.row_key) for h in lim.holders] == [(f"{T}/9/sub/s1:c9", f"{T}/9/sub/s1")]
    assert lim.until == row.not_before and "1 of 1 slots held" in lim.summary
    assert ("deferred", None) in _moments(x) and x.timeline[-1].detail == row.waiting
    # the slot given back: still named (it is what it waited on), no longer full; a slot
    # whose lease ended (its holder died) holds nothing either
    await kit.limits.release(bot_key(T, "b"), f"{T}/9/sub/s1:c9")
    assert await kit.limits.acquire(bot_key(T, "b"), 1, "dead:c", until=now + 1, now=now)
    kit.clock.advance(2)
    x = await _explain(kit)
    assert _names(x) == ["limit", "ownership", "turn"]  # due again meanwhile
    lim = x.holds[0]  # type: ignore[assignment]
    assert isinstance(lim, Limit) and not lim.full and lim.used == 0 and lim.holders == []
    assert "no longer full" in lim.summary


async def test_a_tenant_limit_from_the_settings_is_named_by_its_key(kit: Kit) -> None:
    settings = LimitSettings(tenant_in_flight=1)
    await _rows(kit)
    assert kit.limits is not None
    now = kit.clock.now()
    assert await kit.limits.acquire(tenant_key(T), 1, "x:y", until=now + 3600, now=now)
    worker = kit.worker(build_registry(kit.stores, [], limits=settings))
    assert (await worker.tick_any([T])).deferred == 1
    [lim] = (await _explain(kit, limits=settings)).holds
    assert isinstance(lim, Limit) and (lim.scope, lim.key, lim.full) == ("tenant", tenant_key(T),
                                                                        True)
    # a full limit is named even before any claim met it (its next claim would be deferred)
    await _rows(kit, n=2)  # a second event: a row never claimed
    kit.clock.advance(1)
    x = await _explain(kit, f"{T}/2/sub/s1", limits=settings)
    first = x.holds[0]
    assert isinstance(first, Limit) and first.full and "full now" in first.summary


async def test_a_rate_limit_names_the_launches_counted_in_its_window(kit: Kit) -> None:
    await _rows(kit, Subscription(sub_id="s1", tenant_id=T, bot="b", max_per_second=1.0), n=2)
    res = await kit.worker().tick_any([T])
    assert (res.done, res.deferred) == (1, 1)
    [waiting] = [r for r in await kit.rows(T) if r.state == PENDING]
    x = await _explain(kit, waiting.row_key)
    [lim] = x.holds
    assert isinstance(lim, Limit) and (lim.kind, lim.used, lim.full) == ("per_second", 1, True)
    assert lim.until == waiting.not_before
    assert waiting.not_before >= rate_slot(bot_key(T, "b"), 1.0, kit.clock.now())[2]


async def test_ownership_names_the_replica_that_owns_the_tenant(kit: Kit) -> None:
    assert kit.members is not None
    await _rows(kit)
    now = kit.clock.now()
    x = await _explain(kit)
    own = next(h for h in x.holds if isinstance(h, Ownership))
    assert own.owner is None and own.replicas == 0 and "no replica is alive" in own.summary
    for m in ("replica-a", "replica-b", "replica-c"):
        await kit.members.heartbeat(m, now, 5.0)
    x = await _explain(kit, worker=WorkerSettings(steal_after_seconds=60))
    assert _names(x) == ["ownership", "turn"]
    own = x.holds[0]  # type: ignore[assignment]
    assert isinstance(own, Ownership) and own.replicas == 3
    assert own.owner == owner(["replica-a", "replica-b", "replica-c"], T)
    row = await kit.outbox.get(KEY1)
    assert row is not None and own.steal_at == pytest.approx(row.created_at + 60)
    assert "only its owner claims it" in own.summary
    kit.clock.advance(10)  # the leases ended: nobody again
    own = (await _explain(kit)).holds[0]  # type: ignore[assignment]
    assert isinstance(own, Ownership) and own.owner is None


async def test_a_due_row_waits_its_turn_behind_the_tenants_earlier_rows(kit: Kit) -> None:
    # another tenant's rows, due earlier: not ahead of it (claims are fair across tenants)
    await kit.sub(Subscription(sub_id="o", tenant_id="other", bot="b"))
    await kit.card("other", "c")
    for _ in range(2):
        await kit.emit("other", "card.created", "c")
    await kit.tail(seed="earliest").drain_tenant("other")
    kit.clock.advance(1)
    await _rows(kit, n=3)
    kit.clock.advance(1)
    turns = []
    for seq in (1, 2, 3):
        [t] = [h for h in (await _explain(kit, f"{T}/{seq}/sub/s1")).holds if isinstance(h, Turn)]
        turns.append(t.ahead)
    assert turns == [0, 1, 2]
    [t] = [h for h in (await _explain(kit, f"{T}/1/sub/s1")).holds if isinstance(h, Turn)]
    assert t.ahead == 0 and "first in line" in t.summary
    [t] = [h for h in (await _explain(kit, "other/2/sub/o")).holds if isinstance(h, Turn)]
    assert t.ahead == 1


async def test_a_row_not_due_without_an_error_is_not_a_backoff(kit: Kit) -> None:
    now = kit.clock.now()
    await kit.insert_raw_row({"tenant_id": T, "row_key": KEY1, "seq": 1, "kind": "launch",
                              "sub_id": "s1", "state": PENDING, "not_before": now + 60,
                              "created_at": now, "updated_at": now})
    [h] = (await _explain(kit)).holds
    assert isinstance(h, NotDue) and h.until == now + 60


async def test_a_malformed_row_is_explained_not_raised(kit: Kit) -> None:
    await _rows(kit)
    await kit.insert_raw_row({"tenant_id": T, "row_key": f"{T}/9/sub/s1", "seq": 9,
                              "state": FAILED, "attempts": "many", "errors": "boom"})
    x = await _explain(kit, f"{T}/9/sub/s1")
    [h] = x.holds
    assert isinstance(h, Malformed) and "attempts" in h.problem and x.row is None
    assert _names(await _explain(kit)) == ["ownership", "turn"]  # the row beside it: as ever


async def test_an_unknown_or_malformed_key_is_refused(kit: Kit) -> None:
    with pytest.raises(RowNotFound):
        await _explain(kit, f"{T}/1/sub/nope")
    for bad in ("", "t1", "t1/1/sub", "t1/one/sub/s", "t1/0/sub/s", "t1/1/x/s", "t 1/1/sub/s",
                "t1/1/sub/s\n", "t1/1/sub/s/extra", "t1/99999999999999999999/sub/s"):
        with pytest.raises(InvalidRowKey):
            await _explain(kit, bad)



# --- a pause (F3) -------------------------------------------------------------------------------


def _paused_worker(kit: Kit) -> Any:
    """The service's wiring of the pause gate: the worker checks tenant and subscription, the
    launch handler the bot."""
    from board_outbox.engine.flow.pause import PauseGate

    assert kit.pauses is not None
    gate = PauseGate(kit.pauses, kit.outbox, kit.clock, every=1.0)
    worker = kit.worker(build_registry(kit.stores, [], pause=gate))
    worker.pause = gate
    return worker, gate


async def test_a_held_row_names_its_pause_scope_key_since_and_who(kit: Kit) -> None:
    """A row the worker held for its tenant's pause explains as ``paused``: the pause's scope
    and key, since when it is on (its first pause, not the later change of reason) and who --
    not as a deferral on a limit this version does not know. Lifted, it says the next pause
    read releases it, and who resumed it."""
    assert kit.pauses is not None
    await _rows(kit)
    since = kit.clock.now()
    assert await kit.pauses.pause("tenant", T, reason="INC-42", by="ana", at=since)
    kit.clock.advance(60)
    assert not await kit.pauses.pause("tenant", T, reason="INC-43", by="bo", at=kit.clock.now())
    worker, gate = _paused_worker(kit)
    await gate.refresh(force=True)
    assert (await worker.tick_any([T])).held == 1
    x = await _explain(kit)
    [h] = x.holds
    assert isinstance(h, Paused) and (h.scope, h.key, h.active, h.held) == ("tenant", T, True, True)
    assert (h.since, h.by, h.reason) == (since, "bo", "INC-43")
    assert h.due is not None and h.due <= kit.clock.now()  # its own due time, given back
    assert "held by the pause of tenant t1, since" in h.summary and "resume --tenant t1" in h.summary
    assert not any("names no limit" in n for n in x.notes)
    assert x.row is not None and x.row.attempts == 0

    kit.clock.advance(5)
    assert await kit.pauses.resume("tenant", T, by="cy", at=kit.clock.now())
    kit.clock.advance(1)
    [lifted] = (await _explain(kit)).holds
    assert isinstance(lifted, Paused) and not lifted.active and lifted.held
    assert lifted.by == "cy" and "no longer on (resumed 1.0s ago by cy)" in lifted.summary


async def test_a_due_row_of_a_paused_bot_or_subscription_names_the_pause_before_any_limit(
        kit: Kit) -> None:
    """Not held yet (no claim has tried it since the pause): every pause over it is named --
    its subscription's and, a launch, its bot's -- and no limit is tried (a paused row tries
    none); who claims it and its turn are still said."""
    assert kit.pauses is not None
    await _rows(kit, Subscription(sub_id="s1", tenant_id=T, bot="b", max_in_flight=1))
    now = kit.clock.now()
    await kit.pauses.pause("bot", "b", reason="", by="ana", at=now - 30)
    await kit.pauses.pause("subscription", "s1", reason="noisy", by="bo", at=now - 10)
    x = await _explain(kit, limits=LimitSettings())
    paused = [h for h in x.holds if isinstance(h, Paused)]
    assert [(h.scope, h.key, h.since, h.by, h.held) for h in paused] == [
        ("subscription", "s1", now - 10, "bo", False), ("bot", "b", now - 30, "ana", False)]
    assert "the next claim holds it" in paused[0].summary
    assert _names(x) == ["paused", "paused", "ownership", "turn"]  # and no limit
    # a projection row of a paused tenant is never held: no pause names it
    await kit.pauses.pause("tenant", T, reason="", by="ana", at=now)
    await kit.insert_raw_row({"tenant_id": T, "row_key": f"{T}/1/proj/board-reflect", "seq": 1,
                              "kind": "projection", "projection": "board-reflect",
                              "state": PENDING, "not_before": now, "created_at": now,
                              "updated_at": now})
    assert "paused" not in _names(await _explain(kit, f"{T}/1/proj/board-reflect"))
    assert [(h.scope, h.key) for h in (await _explain(kit)).holds if isinstance(h, Paused)] == [
        ("tenant", T), ("subscription", "s1"), ("bot", "b")]


# --- a coalescing chain -------------------------------------------------------------------------


def _coalesced(seq: int, into: str | None, now: float, state: str = "coalesced",
               **fields: Any) -> dict[str, Any]:
    from datetime import UTC, datetime

    return {"tenant_id": T, "row_key": f"{T}/{seq}/sub/s1", "seq": seq, "kind": "launch",
            "sub_id": "s1", "state": state, "not_before": now, "created_at": now,
            "updated_at": now, "burst_at": now, "done_at": datetime.fromtimestamp(now, UTC),
            **({"coalesced_into": into} if into is not None else {}), **fields}


async def test_a_coalesced_row_names_the_row_that_ran_at_the_end_of_its_chain(kit: Kit) -> None:
    """Eight edits a little apart: rows 1 and 2 were superseded by row 7, which was itself
    superseded by row 8, the one that ran. Rows 1, 2 and 7 each name row 8 as the row that
    ran, and the chain to it; row 8's state decides the words (pending: it runs for them all;
    dead-lettered: none has run)."""
    now = kit.clock.now()
    key = {s: f"{T}/{s}/sub/s1" for s in (1, 2, 7, 8)}
    for seq in (1, 2):
        await kit.insert_raw_row(_coalesced(seq, key[7], now))
    await kit.insert_raw_row(_coalesced(7, key[8], now))
    await kit.insert_raw_row(_coalesced(8, None, now, state=DONE, outcome="launched l-8"))
    for seq in (1, 2):
        [h] = (await _explain(kit, key[seq])).holds
        assert isinstance(h, Coalesced) and h.into == key[7] and h.chain == [key[7], key[8]]
        assert h.ran == key[8] and h.problem is None and h.end_state == DONE
        assert f"itself superseded: {key[8]}: {key[8]} ran instead (launched l-8)" in h.summary
    [h7] = (await _explain(kit, key[7])).holds
    assert isinstance(h7, Coalesced) and h7.chain == [key[8]] and h7.ran == key[8]
    await kit.delete_raw_row(key[8]) if kit.delete_raw_row else None
    await kit.insert_raw_row(_coalesced(8, None, now, state=PENDING, done_at=None))
    [pending] = (await _explain(kit, key[1])).holds
    assert isinstance(pending, Coalesced) and pending.ran is None and pending.end_state == PENDING
    assert "has not run yet (pending): it runs for them all" in pending.summary


async def test_a_chain_that_loops_dangles_or_does_not_decode_is_said_not_followed(
        kit: Kit) -> None:
    """Planted chains: a loop (a -> b -> a), a row pointing at one that is gone, one pointing at
    a row that does not decode, one longer than the bound: each is explained in bounded reads
    with the reason, never followed forever, and names no row as the one that ran."""
    from board_outbox.engine.upkeep.holds.coalescing import CHAIN_LIMIT

    now = kit.clock.now()
    await kit.insert_raw_row(_coalesced(1, f"{T}/2/sub/s1", now))
    await kit.insert_raw_row(_coalesced(2, f"{T}/1/sub/s1", now))  # a loop
    await kit.insert_raw_row(_coalesced(3, f"{T}/99/sub/s1", now))  # gone
    await kit.insert_raw_row(_coalesced(4, f"{T}/5/sub/s1", now))
    await kit.insert_raw_row(_coalesced(5, None, now, state=DONE, attempts="many"))  # malformed
    base = 100
    for i in range(CHAIN_LIMIT + 2):  # 100 -> 101 -> ... -> 133, 134 done
        last = i == CHAIN_LIMIT + 1
        await kit.insert_raw_row(_coalesced(base + i, None if last else f"{T}/{base + i + 1}/sub/s1",
                                            now, state=DONE if last else "coalesced"))
    cases = {1: "loops back to t1/1/sub/s1", 3: "t1/99/sub/s1 is gone",
             4: "t1/5/sub/s1 does not decode", base: f"longer than {CHAIN_LIMIT} rows"}
    for seq, words in cases.items():
        [h] = (await _explain(kit, f"{T}/{seq}/sub/s1")).holds
        assert isinstance(h, Coalesced) and h.ran is None and h.problem is not None, seq
        assert words in h.problem and words in h.summary, (seq, h.summary)
        assert len(h.chain) <= CHAIN_LIMIT


async def test_an_event_dated_in_milliseconds_leaves_its_moment_undated(kit: Kit) -> None:
    """R7: the event store's ``at: 1e12`` is no time: the timeline's event moment is undated and
    a note says why (it was shown as the year 33658 and broke the formatter)."""
    now = kit.clock.now()
    await kit.insert_raw_event({"tenant_id": T, "seq": 1, "type": "card.created", "card_id": "c",
                                "at": 1e12})
    await kit.insert_raw_row({"tenant_id": T, "row_key": KEY1, "seq": 1, "kind": "launch",
                              "sub_id": "s1", "state": PENDING, "not_before": now,
                              "created_at": now, "updated_at": now})
    x = await _explain(kit)
    assert x.timeline[0].what == "event" and x.timeline[0].at is None
    assert any("is not a time (at 1000000000000.0 is out of range" in n for n in x.notes), x.notes
