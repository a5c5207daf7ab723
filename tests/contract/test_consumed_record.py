"""Issue 12, item 8: the card's ``consumed`` record stays bounded without reopening the closed
residual window (a crash between the consume and ``consume_marked`` still launches)."""

from __future__ import annotations

import pytest

from board_outbox.model.board import CONSUMED_CAP
from board_outbox.model.subscriptions import MatchRule, Subscription
from tests.support.faults import Crash
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

T = "t1"
SHIP = Subscription(sub_id="ship", tenant_id=T, bot="shipper",
                    rule=MatchRule(event_types=("card.labeled",)), consume_labels=("ship",))


async def _labeled(kit: Kit) -> str:
    await kit.sub(SHIP)
    await kit.card(T, "c1", labels=("ship",))
    await kit.emit(T, "card.labeled", "c1")
    await kit.tail(seed="earliest").drain_all([T])
    (row,) = await kit.rows(T)
    return row.row_key


async def test_the_entry_goes_once_consume_marked_is_durable(kit: Kit) -> None:
    key = await _labeled(kit)
    assert (await kit.worker().tick_any()).done == 1
    # the row's entry is gone: the same row asking again (labels back) would consume afresh
    await kit.card(T, "c1", labels=("ship",))
    assert await kit.labels.consume(T, "c1", ("ship",), by=key) == "consumed"


async def test_a_crash_before_consume_marked_keeps_the_entry_and_still_launches(kit: Kit) -> None:
    key = await _labeled(kit)
    kit.faults.crash_at("outbox.apply_claimed[consumed]")
    with pytest.raises(Crash):
        await kit.worker(lease_seconds=10).tick_any()
    kit.clock.advance(11)
    assert (await kit.worker(lease_seconds=10).tick_any()).done == 1
    assert [r.row_key for r in kit.launcher.launches] == [key]  # the window stays closed
    await kit.card(T, "c1", labels=("ship",))
    assert await kit.labels.consume(T, "c1", ("ship",), by=key) == "consumed"  # and trimmed


async def test_the_record_is_capped_at_the_newest_entries(kit: Kit) -> None:
    await kit.card(T, "c1")
    for i in range(CONSUMED_CAP + 6):  # rows that consumed and died before their mark
        await kit.card(T, "c1", labels=("ship",))
        assert await kit.labels.consume(T, "c1", ("ship",), by=f"row-{i}") == "consumed"
    assert await kit.labels.consume(T, "c1", ("ship",), by=f"row-{CONSUMED_CAP + 5}") == "already"
    assert await kit.labels.consume(T, "c1", ("ship",), by="row-6") == "already"
    assert await kit.labels.consume(T, "c1", ("ship",), by="row-5") == "absent"  # trimmed
