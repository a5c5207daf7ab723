"""``[tail] seed = "latest"`` against the store-wide epoch (``model/epoch.py``), on every backend:
only the events written at or before the epoch -- when the deployment began following the
board -- are left unlaunched. A tenant born later is read from its first event, whether a
running replica or the next one to start first sees it."""

from __future__ import annotations

import pytest

from board_outbox.model.subscriptions import Subscription
from tests.support.kits import Kit

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def tenant(kit: Kit, t: str) -> None:
    await kit.sub(Subscription(sub_id=f"{t}-all", tenant_id=t, bot="bot"))
    await kit.card(t, "c")


async def launched(kit: Kit, t: str) -> list[int]:
    return sorted(r.seq for r in await kit.rows(t))


async def test_a_tenant_born_while_the_service_runs_has_its_first_event_launched(kit: Kit) -> None:
    tail = kit.tail(seed="latest")
    await tail.begin()  # the service starts: the epoch is written
    await tail.drain_all()
    kit.clock.advance(5.0)
    await tenant(kit, "newborn")
    await kit.emit("newborn", "card.created", "c")  # its counter is at 1 when first seen
    await tail.drain_all(["newborn"])
    assert await launched(kit, "newborn") == [1]
    assert await kit.cursors.get("newborn") == 1


async def test_a_tenant_born_while_no_replica_runs_is_read_from_its_first_event(kit: Kit) -> None:
    first = kit.tail(seed="latest")
    epoch = await first.begin()  # the first replica ever, then every replica stops
    kit.clock.advance(3600.0)  # an outage, a deploy
    await tenant(kit, "outage-born")
    for _ in range(3):
        await kit.emit("outage-born", "card.created", "c")
    later = kit.tail(seed="latest")  # a new process: the epoch is read, not written again
    assert await later.begin() == epoch
    await later.drain_all(["outage-born"])
    assert await launched(kit, "outage-born") == [1, 2, 3]


async def test_a_tenant_with_history_is_still_seeded_at_its_latest(kit: Kit) -> None:
    await tenant(kit, "old")
    for _ in range(3):
        await kit.emit("old", "card.created", "c")  # history, before the deployment
    kit.clock.advance(1.0)
    tail = kit.tail(seed="latest")
    await tail.begin()
    kit.clock.advance(5.0)
    for _ in range(2):
        await kit.emit("old", "card.created", "c")  # written after the epoch, before a drain
    assert await tail.cursor("old") == 3
    await tail.drain_all(["old"])
    assert await launched(kit, "old") == [4, 5]


async def test_events_with_no_time_count_as_history(kit: Kit) -> None:
    """The producer always writes ``at``; an event without one (another writer) is never
    launched by a ``latest`` seed: a store whose events carry no time keeps the old meaning."""
    await tenant(kit, "timeless")
    tail = kit.tail(seed="latest")
    await tail.begin()
    kit.clock.advance(5.0)
    for at in (None, 0.0):
        seq = await kit.events.allocate_seq("timeless")
        doc = {"tenant_id": "timeless", "seq": seq, "type": "card.created", "card_id": "c"}
        await kit.events.insert(doc if at is None else {**doc, "at": at})
    await kit.emit("timeless", "card.created", "c")  # 3: after the epoch
    assert await tail.cursor("timeless") == 2


async def test_the_epoch_is_never_a_tenants_cursor(kit: Kit) -> None:
    tail = kit.tail(seed="latest")
    await tail.begin()
    await tenant(kit, "t")
    await kit.emit("t", "card.created", "c")
    await tail.drain_all(["t"])
    assert await kit.cursors.all() == {"t": 1}
