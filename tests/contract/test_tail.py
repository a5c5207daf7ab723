"""The tail's guarantees (SPEC M1, M2, M3, M7, M11), on every backend."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
import pytest

from board_outbox.model.row_keys import launch_row_key, projection_row_key
from board_outbox.model.subscriptions import MatchRule, Subscription
from tests.support.faults import Crash
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

T = "t1"
ALL = Subscription(sub_id="all", tenant_id=T, bot="bot-a")
INBOX = Subscription(sub_id="inbox", tenant_id=T, bot="bot-b",
                     rule=MatchRule(event_types=("card.created",), column="inbox"))


async def board(kit: Kit, n: int = 4) -> None:
    await kit.sub(ALL)
    await kit.sub(INBOX)
    for i in range(1, n + 1):
        await kit.card(T, f"c{i}", column="inbox" if i % 2 else "doing")
        await kit.emit(T, "card.created", f"c{i}")


def expected_keys(n: int = 4) -> set[str]:
    keys = {launch_row_key(T, i, "all") for i in range(1, n + 1)}
    keys |= {launch_row_key(T, i, "inbox") for i in range(1, n + 1) if i % 2}
    return keys


async def keys(kit: Kit) -> list[str]:
    return sorted(r.row_key for r in await kit.rows(T))


# --- M1 -----------------------------------------------------------------------------------


async def test_batch_materializes_matched_rows_then_advances_cursor(kit: Kit) -> None:
    await board(kit)
    tail = kit.tail(seed="earliest")
    res = await tail.drain_tenant(T)
    assert (res.cursor_before, res.cursor_after, res.read, res.rows) == (0, 4, 4, 6)
    assert await keys(kit) == sorted(expected_keys())
    assert await kit.cursors.get(T) == 4
    row = next(r for r in await kit.rows(T) if r.sub_id == "inbox")
    assert row.event is not None and row.event.column == "inbox" and row.kind == "launch"
    assert (await tail.drain_tenant(T)).read == 0  # nothing more; idempotent tick


async def test_transient_store_error_aborts_batch_with_cursor_untouched(kit: Kit) -> None:
    await board(kit)
    tail = kit.tail(seed="earliest")
    await tail.cursor(T)
    kit.faults.fail_at("cards.get_many")  # the batch's card read blips
    res = await tail.drain_tenant(T)
    assert res.stopped == "aborted" and "injected" in res.error
    assert await kit.cursors.get(T) == 0
    assert await keys(kit) == []  # not even the first two events' rows: the batch is atomic
    res = await tail.drain_tenant(T)  # next tick: the blip is over
    assert res.cursor_after == 4 and await keys(kit) == sorted(expected_keys())


@pytest.mark.parametrize("point", ["events.read_after", "subs.list_for_tenant",
                                   "outbox.upsert_rows", "cursor.compare_and_set"])
async def test_transient_error_at_any_store_call_loses_nothing(kit: Kit, point: str) -> None:
    await board(kit)
    tail = kit.tail(seed="earliest")
    await tail.cursor(T)
    kit.faults.fail_at(point)
    assert (await tail.drain_tenant(T)).stopped == "aborted"
    assert await kit.cursors.get(T) == 0
    await tail.drain_tenant(T)
    assert await keys(kit) == sorted(expected_keys()) and await kit.cursors.get(T) == 4


async def test_deleted_card_is_skipped_and_only_it(kit: Kit) -> None:
    await board(kit)
    await kit.cards.delete(T, "c3")
    res = await kit.tail(seed="earliest").drain_tenant(T)
    assert res.skipped_deleted == 1 and res.cursor_after == 4
    assert await keys(kit) == sorted(k for k in expected_keys() if "/3/" not in k)


async def test_deleted_event_type_needs_no_card(kit: Kit) -> None:
    await kit.sub(ALL)
    await kit.emit(T, "card.deleted", "gone")
    tail = kit.tail(seed="earliest", projections=("board-reflect",))
    res = await tail.drain_tenant(T)
    assert res.cursor_after == 1 and res.skipped_deleted == 0
    # a deleted card matches no subscription, but its projection row exists
    assert await keys(kit) == [projection_row_key(T, 1, "board-reflect")]


async def test_cas_lost_to_another_replica_is_normal(kit: Kit) -> None:
    await board(kit)
    a = kit.tail(seed="earliest")
    await a.cursor(T)
    kit.faults.crash_at("cursor.compare_and_set")  # a stalls right before its CAS ...
    with pytest.raises(Crash):
        await a.drain_tenant(T)
    await kit.cursors.compare_and_set(T, 0, 2)  # ... while b's CAS wins first
    res = await a.drain_tenant(T)
    assert res.cursor_before == 2 and res.cursor_after == 4
    assert await keys(kit) == sorted(expected_keys())


async def test_four_racing_tails_write_every_row_exactly_once(kit: Kit) -> None:
    await board(kit, n=40)
    tails = [kit.tail(seed="earliest", batch_size=7) for _ in range(4)]

    async def run(t: object) -> None:
        for _ in range(12):
            await t.drain_all([T])  # type: ignore[attr-defined]

    async with anyio.create_task_group() as tg:
        for t in tails:
            tg.start_soon(run, t)
    assert await keys(kit) == sorted(expected_keys(40))
    assert await kit.cursors.get(T) == 40


# --- M2: every crash point ------------------------------------------------------------------

CRASH_POINTS = [
    "events.read_after",  # before anything
    "cards.get_many",  # mid-normalize
    "subs.list_for_tenant",  # after normalize, before match
    "outbox.upsert_rows",  # before upsert
    "outbox.upsert_rows.after",  # after upsert, before CAS
    "cursor.compare_and_set",  # right before CAS
    "cursor.compare_and_set.after",  # after CAS
]


@pytest.mark.parametrize("point", CRASH_POINTS)
async def test_crash_at_every_point_then_restart_loses_and_doubles_nothing(
    kit: Kit, point: str
) -> None:
    await board(kit)
    await kit.tail(seed="earliest").cursor(T)
    kit.faults.crash_at(point)
    with pytest.raises(Crash):
        await kit.tail(seed="earliest").drain_tenant(T)
    assert kit.faults.fired[point] == 1  # the fault really fired
    restarted = kit.tail(seed="earliest")  # a new process: no in-memory state survives
    await restarted.drain_all([T])
    rows = await kit.rows(T)
    assert sorted(r.row_key for r in rows) == sorted(expected_keys())
    assert len(rows) == len({r.row_key for r in rows})
    assert await kit.cursors.get(T) == 4


@pytest.mark.parametrize("keep", [1, 3, 5])
async def test_crash_in_the_middle_of_the_bulk_upsert(kit: Kit, keep: int) -> None:
    await board(kit)
    await kit.tail(seed="earliest").cursor(T)
    kit.faults.partial["outbox.upsert_rows"] = keep
    with pytest.raises(Crash):
        await kit.tail(seed="earliest").drain_tenant(T)
    assert len(await keys(kit)) == keep and await kit.cursors.get(T) == 0
    await kit.tail(seed="earliest").drain_all([T])
    assert await keys(kit) == sorted(expected_keys()) and await kit.cursors.get(T) == 4


# --- M3 -------------------------------------------------------------------------------------


async def test_projection_rows_are_written_for_every_event(kit: Kit) -> None:
    await board(kit)
    await kit.tail(seed="earliest", projections=("board-reflect",)).drain_tenant(T)
    rows = await kit.rows(T)
    proj = sorted(r.seq for r in rows if r.kind == "projection")
    assert proj == [1, 2, 3, 4]
    assert all(r.sub_id is None and r.projection == "board-reflect"
               for r in rows if r.kind == "projection")


# --- M7: seq holes and the cursor seed ---------------------------------------------------


async def _hole(kit: Kit) -> None:
    await kit.sub(ALL)
    await kit.card(T, "c")
    await kit.emit(T, "card.created", "c")  # 1
    await kit.events.allocate_seq(T)  # 2: allocated, insert in flight
    await kit.emit(T, "card.updated", "c")  # 3


async def test_young_gap_truncates_batch(kit: Kit) -> None:
    await _hole(kit)
    tail = kit.tail(seed="earliest", young_gap_seconds=30)
    res = await tail.drain_tenant(T)
    assert res.stopped == "young_gap" and res.cursor_after == 1
    kit.clock.advance(29)
    assert (await tail.drain_tenant(T)).cursor_after == 1  # still young
    await kit.events.insert({"tenant_id": T, "seq": 2, "type": "card.moved", "card_id": "c"})
    res = await tail.drain_tenant(T)
    assert res.cursor_after == 3 and res.stepped_gaps == 0
    assert sorted(r.seq for r in await kit.rows(T)) == [1, 2, 3]


async def test_old_gap_is_a_dead_allocation_stepped_over_with_one_warning(
    kit: Kit, caplog: pytest.LogCaptureFixture
) -> None:
    await _hole(kit)
    tail = kit.tail(seed="earliest", young_gap_seconds=30)
    await tail.drain_tenant(T)
    kit.clock.advance(31)
    with caplog.at_level(logging.WARNING, logger="board_outbox.tail"):
        res = await tail.drain_tenant(T)
        await tail.drain_tenant(T)
    assert res.cursor_after == 3 and res.stepped_gaps == 1
    warnings = [r for r in caplog.records if "dead allocation" in r.getMessage()]
    assert len(warnings) == 1
    assert sorted(r.seq for r in await kit.rows(T)) == [1, 3]


async def test_cursor_seed_is_max_inserted_not_allocator(kit: Kit) -> None:
    await kit.sub(ALL)
    await kit.card(T, "c")
    for _ in range(4):
        await kit.emit(T, "card.created", "c")  # 1..4 inserted
    s5, s6 = await kit.events.allocate_seq(T), await kit.events.allocate_seq(T)
    tail = kit.tail(seed="latest")
    assert await tail.cursor(T) == 4  # the allocator says 6
    for s in (s5, s6):
        await kit.events.insert({"tenant_id": T, "seq": s, "type": "card.moved", "card_id": "c"})
    await tail.drain_tenant(T)
    assert sorted(r.seq for r in await kit.rows(T)) == [5, 6]


async def test_earliest_seed_replays_history(kit: Kit) -> None:
    """Events inserted before the tail ever ran are materialized: rows for the old events."""
    await board(kit)
    tail = kit.tail(seed="earliest")
    assert await tail.cursor(T) == 0
    assert await keys(kit) == []  # nothing materialized before the first drain
    await tail.drain_all([T])
    assert await keys(kit) == sorted(expected_keys())  # every old event got its rows
    assert await kit.cursors.get(T) == 4
    # the other seed mode, on a tenant with history, skips it (so the check above can fail)
    await kit.sub(Subscription(sub_id="all2", tenant_id="t2", bot="bot-a"))
    await kit.card("t2", "c1")
    await kit.emit("t2", "card.created", "c1")
    await kit.tail(seed="latest").drain_all(["t2"])
    assert await kit.rows("t2") == [] and await kit.cursors.get("t2") == 1


# --- M11: poison and liveness ------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"type": 123, "card_id": "c"},  # wrong type
        {"type": "card.created"},  # missing card_id
        {"type": "card.created", "card_id": "c", "at": "yesterday"},
    ],
)
async def test_poison_event_skipped_after_20_ticks_with_one_error(
    kit: Kit, caplog: pytest.LogCaptureFixture, bad: dict[str, object]
) -> None:
    await kit.sub(ALL)
    await kit.card(T, "c")
    await kit.emit(T, "card.created", "c")  # 1
    s = await kit.events.allocate_seq(T)
    await kit.insert_raw_event({"tenant_id": T, "seq": s, **bad})  # 2: poison
    await kit.emit(T, "card.updated", "c")  # 3
    tail = kit.tail(seed="earliest", poison_ticks=20)
    first = await tail.drain_tenant(T)
    assert first.stopped == "poison" and first.cursor_after == 1  # prefix materialized
    head_ticks = 0
    with caplog.at_level(logging.ERROR, logger="board_outbox.tail"):
        while (await kit.cursors.get(T)) == 1:
            res = await tail.drain_tenant(T)
            head_ticks += 1
            assert head_ticks <= 20
    assert head_ticks == 20 and res.skipped_poison == 1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "poison" in errors[0].getMessage()
    assert sorted(r.seq for r in await kit.rows(T)) == [1, 3]


async def test_malformed_card_goes_through_the_poison_path(kit: Kit) -> None:
    await kit.sub(ALL)
    await kit.put_raw_card(T, "c", {"tenant_id": T, "card_id": "c", "labels": 7})
    await kit.emit(T, "card.created", "c")
    tail = kit.tail(seed="earliest", poison_ticks=3)
    results = [await tail.drain_tenant(T) for _ in range(3)]
    assert [r.stopped for r in results[:2]] == ["poison", "poison"]
    assert results[2].skipped_poison == 1 and await kit.cursors.get(T) == 1


async def test_store_outage_never_counts_as_poison(kit: Kit) -> None:
    await board(kit)
    tail = kit.tail(seed="earliest", poison_ticks=3)
    await tail.cursor(T)
    kit.faults.fail_at("cards.get_many", times=10)
    for _ in range(10):
        assert (await tail.drain_tenant(T)).stopped == "aborted"
    await tail.drain_tenant(T)
    assert await keys(kit) == sorted(expected_keys())  # nothing skipped by the outage


async def test_tenants_are_subscriptions_union_live_rows(kit: Kit) -> None:
    await board(kit)
    tail = kit.tail(seed="earliest")
    await tail.drain_tenant(T)
    await kit.subs.delete("all")
    await kit.subs.delete("inbox")
    assert await kit.subs.tenants() == set()
    assert T in await tail.tenants()  # its rows still need executing (M11)


class _RacingHeads:
    """An event log whose ``heads`` lets another replica run before it returns: the counters
    it read are then older than anything read after them."""

    def __init__(self, inner: object, during: Callable[[], Awaitable[None]]) -> None:
        self._inner, self._during = inner, during

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def heads(self) -> dict[str, int]:
        got: dict[str, int] = await self._inner.heads()  # type: ignore[attr-defined]
        during, self._during = self._during, _nothing  # once
        await during()
        return got


async def _nothing() -> None:
    return None


async def test_a_cursor_advanced_during_the_poll_net_never_looks_ahead_of_its_counter(
        kit: Kit) -> None:
    """Found by the fault harness driving the poll net: replica A reads the counters, replica B
    materializes a new event and advances the cursor, A reads the cursors. Read in that order,
    the cursor looks ahead of its counter and A holds the tenant until an operator resets it;
    the poll net reads the cursors first, so a later counter is never below them."""
    await board(kit, n=1)
    b = kit.tail()
    await b.drain_all([T])
    assert await kit.cursors.get(T) == 1

    async def other_replica() -> None:
        await kit.emit(T, "card.created", "c9")
        await b.drain_all([T])

    a = kit.tail()
    a.events = _RacingHeads(kit.events, other_replica)  # type: ignore[assignment]
    await a.behind()
    assert await kit.cursors.get(T) == 2  # the other replica did advance it meanwhile
    assert a.cursor_ahead == {}
    assert await kit.cursors.holds() == {}
    # and the tenant still drains: the next event is materialized by A
    await kit.emit(T, "card.created", "c10")
    assert T in await a.behind()
    await a.drain_all([T])
    assert await kit.cursors.get(T) == 3


async def test_a_short_read_is_not_the_end_of_the_log(kit: Kit) -> None:
    """A backend may read the next ``limit`` seqs rather than the next ``limit`` events
    (``EventLog.read_after``): reads that step over dead allocations come back short, and only
    an empty read is the end. Reading on from the last seq read collects every event."""
    await kit.card(T, "c")
    want = []
    for seq in range(1, 25):
        if seq % 4 == 3:
            await kit.events.allocate_seq(T)  # 3, 7, 11...: allocated, never inserted
        else:
            await kit.emit(T, "card.updated", "c")
            want.append(seq)
    got, after = [], 0
    for _ in range(30):
        records = await kit.events.read_after(T, after, 4)
        if not records:
            break
        assert len(records) <= 4 and [r.seq for r in records] == sorted(r.seq for r in records)
        got += [r.seq for r in records]
        after = records[-1].seq
    assert got == want


async def test_a_batch_that_passed_its_limits_worth_of_seqs_has_more_behind(kit: Kit) -> None:
    """The tail drains on in the same pass after a batch that read fewer events than its limit
    but moved the cursor over the limit's worth of seqs (gaps stepped over inside its window);
    a batch that stopped short of that is caught up."""
    from board_outbox.engine.tail.tail import DrainResult

    tail = kit.tail(batch_size=4)
    stepped = DrainResult(tenant_id=T, limit=4, read=3, cursor_before=10, cursor_after=14)
    assert tail.more_behind(stepped)
    short = DrainResult(tenant_id=T, limit=4, read=3, cursor_before=10, cursor_after=13)
    assert not tail.more_behind(short)
    full = DrainResult(tenant_id=T, limit=4, read=4, cursor_before=10, cursor_after=12)
    assert tail.more_behind(full)  # read its limit (a young gap would have stopped it)
    stopped = DrainResult(tenant_id=T, limit=4, read=4, cursor_before=10, cursor_after=14,
                          stopped="young_gap")
    assert not tail.more_behind(stopped)
