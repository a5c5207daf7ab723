"""The console's page of tenants that need a look (``StatusStore.attention``) and the first
event past each lagging cursor (``next_event_at``), on every backend: sorted and cut in the
store, tenants in any insertion order, bad counters left out, and the totals over every
tenant (issue 30)."""

from __future__ import annotations

import random

import pytest

from board_outbox.model.board import EventSnapshot
from board_outbox.model.rows import new_launch_row
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import StatusStore
from board_outbox.service.health import NextEvents
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio


def _status(kit: Kit) -> StatusStore:
    assert kit.status_store is not None
    return kit.status_store


async def _tenant(kit: Kit, t: str, head: int, cursor: int | None, failed: int = 0) -> None:
    for _ in range(head):
        await kit.events.allocate_seq(t)
    if cursor is not None:
        await kit.cursors.put(t, cursor)
    now = kit.clock.now()
    for seq in range(1, failed + 1):
        row = new_launch_row(t, EventSnapshot(seq=seq, type="card.created", card_id="c", at=now),
                             Subscription(sub_id="s", tenant_id=t, bot="b"), now=now)
        row.state = "failed"
        await kit.outbox.upsert_rows([row])


async def test_the_page_is_most_behind_first_then_dead_letters_cut_in_the_store(kit: Kit) -> None:
    # (tenant, head, cursor, failed rows), inserted in a shuffled order
    spec = [("a", 5, 5, 0), ("b", 9, 2, 0), ("c", 4, 3, 0), ("d", 3, 3, 2), ("e", 7, None, 0),
            ("f", 6, 6, 1), ("g", 8, 1, 0), ("h", 2, 0, 1), ("i", 0, 0, 0), ("j", 1, 0, 0)]
    random.Random(7).shuffle(spec)
    for t, head, cursor, failed in spec:
        await _tenant(kit, t, head, cursor, failed)
    page = await _status(kit).attention(0, 100)
    # lag: b 7, g 7, e 7 (no cursor), h 2 (+1 failed), c 1, j 1; then failed only: d 2, f 1
    assert [(x.tenant_id, x.lag, x.dead_letters) for x in page.tenants] == [
        ("b", 7, 0), ("e", 7, 0), ("g", 7, 0), ("h", 2, 1), ("c", 1, 0), ("j", 1, 0),
        ("d", 0, 2), ("f", 0, 1)]
    assert (page.listed, page.total, page.behind, page.events_behind, page.dead_letters) == \
        (8, 10, 6, 25, 4)
    second = await _status(kit).attention(3, 3)
    assert [x.tenant_id for x in second.tenants] == ["h", "c", "j"]
    assert second.listed == 8
    assert (await _status(kit).attention(8, 5)).tenants == []


async def test_a_counter_that_is_not_an_integer_is_left_out_of_the_page(kit: Kit) -> None:
    await _tenant(kit, "ok", 3, 1)
    await _tenant(kit, "bad", 0, 0)
    await kit.cursors.put("bad", 0)
    from board_outbox.adapters.memory.status import MemoryStatusStore

    if isinstance(kit.status_store, MemoryStatusStore):
        kit.status_store.events._counters["bad"] = "12"  # type: ignore[assignment]
    else:
        await kit.status_store.counters.update_one(  # type: ignore[union-attr]
            {"_id": "bad"}, {"$set": {"seq": "12"}}, upsert=True)
    page = await _status(kit).attention(0, 10)
    assert [(x.tenant_id, x.lag) for x in page.tenants] == [("ok", 2)]


async def test_the_first_event_past_each_cursor(kit: Kit) -> None:
    for t, seqs in (("x", (1, 2, 5, 7)), ("y", (1,)), ("z", (4, 6))):
        for seq in seqs:
            await kit.insert_raw_event({"tenant_id": t, "seq": seq, "type": "card.created",
                                        "card_id": "c", "at": 1000.0 + 10 * seq})
    got = await _status(kit).next_event_at({"x": 2, "y": 1, "z": 0, "w": 0})
    assert got == {"x": 1050.0, "z": 1040.0}  # y: none past 1; w: no events
    # a refresh over NextEvents reads each lagging tenant once while its cursor stands still
    reads: list[int] = []
    real = _status(kit).next_event_at

    class Spy:
        async def next_event_at(self, after: dict[str, int]) -> dict[str, float]:
            reads.append(len(after))
            return await real(after)

    ne = NextEvents(budget=2)
    lagging = {"x": (2, 3), "z": (0, 6), "y": (0, 1)}
    first = await ne.at(Spy(), lagging)  # type: ignore[arg-type]
    assert reads == [2] and first == {"z": 1040.0, "x": 1050.0}  # most behind first
    second = await ne.at(Spy(), lagging)  # type: ignore[arg-type]
    assert reads == [2, 1] and second == {"z": 1040.0, "x": 1050.0, "y": 1010.0}
    third = await ne.at(Spy(), lagging)  # type: ignore[arg-type]
    assert reads == [2, 1] and third == second  # nothing moved: nothing read
    lagging["x"] = (5, 2)  # x's cursor moved: read again, at its new first event
    fourth = await ne.at(Spy(), lagging)  # type: ignore[arg-type]
    assert reads == [2, 1, 1] and fourth["x"] == 1070.0
    del lagging["z"]  # z caught up: forgotten, read afresh if it falls behind again
    await ne.at(Spy(), lagging)  # type: ignore[arg-type]
    lagging["z"] = (0, 6)
    assert (await ne.at(Spy(), lagging))["z"] == 1040.0 and reads[-1] == 1  # type: ignore[arg-type]


async def test_holds_read_for_some_tenants_name_only_those(kit: Kit) -> None:
    for t in ("a", "b", "c"):
        await kit.cursors.put(t, 5)
    await kit.cursors.hold("a", 5, 3)
    await kit.cursors.hold("b", 5, 4)
    assert await kit.cursors.holds() == {"a": (5, 3), "b": (5, 4)}
    assert await kit.cursors.holds(["b", "c", "zz"]) == {"b": (5, 4)}
    assert await kit.cursors.holds([]) == {}
