"""S6: what a replica sends with nothing to do does not grow with the replica count or the tenant
count. One replica, the keeper, refreshes the store-wide gauges; every replica takes its own
tenants' lag from its poll net's last read; the pauses ride the membership heartbeat's read of
the members; a quiet stream's token is saved once a minute."""

from __future__ import annotations

import random
import uuid
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.engine.flow.membership import owner
from board_outbox.model.board import Card
from board_outbox.model.clock import ManualClock
from board_outbox.model.errors import StoreUnavailable
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.resume import QUIET_SAVE_SECONDS, ResumePoint
from board_outbox.service.runtime import Service

pytestmark = pytest.mark.anyio
TENANTS = [f"t{i}" for i in range(8)]


class Calls:
    """Counts the calls of chosen methods of a store object (wrapped in place)."""

    def __init__(self, target: Any, *names: str) -> None:
        self.n = dict.fromkeys(names, 0)
        for name in names:
            real = getattr(target, name)

            async def call(*a: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                self.n[_name] += 1
                return await _real(*a, **kw)

            setattr(target, name, call)


async def two_replicas(backend: MemoryBackend, clock: ManualClock) -> tuple[Service, Service]:
    for t in TENANTS:
        await backend.subs.put(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="b"))
        await backend.board.put(Card(tenant_id=t, card_id="c"))
        await backend.events.emit(t, "card.created", "c")
    services = []
    for name in ("a", "b"):
        cfg = load_config(env={}, projections=[], service={"replica_name": name},  # type: ignore[arg-type]
                          tail={"seed": "earliest", "stall_seconds": 60})
        s = Service(backend.stores(), cfg, clock=clock, rng=random.Random(1), member_id=name)
        s.status_enabled = True
        services.append(s)
    for s in services:
        await s.membership_pass()
    for s in services:
        await s.membership_pass()  # both see both
    a, b = services
    return a, b


async def test_one_replica_keeps_the_store_wide_gauges_the_others_their_own_tenants() -> None:
    backend = MemoryBackend()
    clock = ManualClock(1000.0)
    a, b = await two_replicas(backend, clock)
    assert a.ownership.members == b.ownership.members == ("a", "b")
    assert [a.ownership.keeps(), b.ownership.keeps()].count(True) == 1
    keeper, other = (a, b) if a.ownership.keeps() else (b, a)
    counts = Calls(backend.outbox, "count_by_state")
    reads = Calls(backend.events, "heads")
    for s in (keeper, other):
        await s.drain_pass(True)  # the poll net: every counter and cursor, read once
    polled = reads.n["heads"]
    assert polled == 2
    await other.refresh_gauges()
    # no read of its own: the lag from its poll net, no count, no status read
    assert counts.n["count_by_state"] == 0 and reads.n["heads"] == polled
    mine = {t for t in TENANTS if owner(("a", "b"), t) == other.ownership.member_id}
    assert mine and set(other.metrics.lag) == mine and other.metrics.rows == {}
    assert set(other.status) == mine and other.history_headroom is None
    await keeper.refresh_gauges()
    assert counts.n["count_by_state"] >= 1
    assert set(keeper.status) == set(TENANTS)  # every tenant's, from the store
    # the keeper leaves: the other keeps the gauges from its next beat on
    await keeper.ownership.leave()
    clock.advance(60)  # the keeper's lease has run out too
    await other.membership_pass()
    assert other.ownership.keeps()


async def test_a_replica_that_is_not_the_keeper_sees_its_own_tenants_stall() -> None:
    """Its /readyz names its stalled tenants from the poll net's figures alone."""
    backend = MemoryBackend()
    clock = ManualClock(1000.0)
    a, b = await two_replicas(backend, clock)
    other = b if a.ownership.keeps() else a
    mine = sorted(t for t in TENANTS if owner(("a", "b"), t) == other.ownership.member_id)
    await backend.events.emit(mine[0], "card.created", "c")  # behind, and its reads fail
    real = backend.events.read_after

    async def failing(tenant_id: str, *args: Any) -> Any:
        if tenant_id == mine[0]:
            raise StoreUnavailable("injected")
        return await real(tenant_id, *args)

    backend.events.read_after = failing  # type: ignore[method-assign]
    for _ in range(2):
        await other.drain_pass(True)
        await other.refresh_gauges()
        clock.advance(61)
    assert other.status[mine[0]].stalled and other.status[mine[0]].lag_events == 2
    assert not any(st.stalled for t, st in other.status.items() if t != mine[0])


async def test_the_gauges_read_the_store_when_the_poll_nets_figures_are_stale() -> None:
    backend = MemoryBackend()
    clock = ManualClock(1000.0)
    cfg = load_config(env={}, projections=[])  # type: ignore[arg-type]
    service = Service(backend.stores(), cfg, clock=clock, rng=random.Random(1))
    await backend.events.emit("t", "card.created", "c")
    reads = Calls(backend.events, "heads")
    await service.refresh_gauges()  # no poll net yet: read
    assert reads.n["heads"] == 1 and service.metrics.lag == {"t": 1}
    await service.drain_pass(True)
    await service.refresh_gauges()  # fresh: reused
    assert reads.n["heads"] == 2
    clock.advance(cfg.service.metrics_interval_seconds + service.poll_interval + 1)
    await service.refresh_gauges()  # stale: read again
    assert reads.n["heads"] == 3


async def test_a_quiet_streams_token_is_saved_once_a_minute_a_delivered_change_sooner() -> None:
    saved: list[Any] = []

    class Store:
        async def load(self) -> Any:
            return None

        async def save(self, token: Any) -> None:
            saved.append(token)

        async def clear(self) -> None:
            pass

        async def saved_at(self) -> float | None:
            return None

    now = [0.0]
    point = ResumePoint(Store(), every_seconds=5, now=lambda: now[0])  # type: ignore[arg-type]
    point.reached(1, quiet=True)
    assert await point.save() and saved == [1]
    for t in range(2, 20):  # quiet batches every second: no save within the minute
        now[0] += 1
        point.reached(t, quiet=True)
        assert not await point.save()
    now[0] = QUIET_SAVE_SECONDS
    point.reached(99, quiet=True)
    assert await point.save() and saved == [1, 99]
    now[0] += 5
    point.reached(100)  # a change delivered: saved after token_save_seconds again
    assert await point.save() and saved == [1, 99, 100]


@pytest.mark.live_mongo
async def test_the_pauses_ride_the_heartbeats_read_on_the_wire(live_uri: str) -> None:
    """One update (the lease) and one aggregate (the members, and the pauses by $unionWith):
    no read of the pauses of their own."""
    from pymongo import AsyncMongoClient, monitoring

    from board_outbox.adapters.mongo.membership import MongoMembershipStore
    from board_outbox.adapters.mongo.pauses import MongoPauseStore

    class Sent(monitoring.CommandListener):
        def __init__(self) -> None:
            self.commands: list[tuple[str, str]] = []

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            coll = event.command.get(event.command_name)
            self.commands.append((event.command_name, coll if isinstance(coll, str) else ""))

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    sent = Sent()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        live_uri, tz_aware=True, event_listeners=[sent])
    db = client[f"board_outbox_test_beat_{uuid.uuid4().hex[:8]}"]
    try:
        members, pauses = MongoMembershipStore(db), MongoPauseStore(db)
        await pauses.pause("tenant", "acme", reason="maintenance", by="ops", at=1.0)
        await pauses.pause("bot", "b", reason="", by="ops", at=2.0)
        await pauses.resume("bot", "b", by="ops", at=3.0)
        await members.heartbeat("other", 100.0, 10.0)
        sent.commands.clear()
        live, got = await members.heartbeat_with_pauses("me", 100.0, 10.0)
        assert sent.commands == [("update", "board_outbox_members"),
                                 ("aggregate", "board_outbox_members")]
        assert [m.member_id for m in live] == ["me", "other"]
        assert {(p.scope, p.key, p.active) for p in got} == {
            ("tenant", "acme", True), ("bot", "b", False)}
        assert got == sorted(await pauses.all(), key=lambda p: got.index(p))
    finally:
        await client.drop_database(db.name)
        await client.close()


async def test_an_idle_replicas_heartbeat_is_its_only_pause_read() -> None:
    """Through ``run``: the pause loop is not started while the membership carries them."""
    backend = MemoryBackend()
    calls = Calls(backend.pauses, "all")
    cfg = load_config(env={}, membership={"heartbeat_timeout_seconds": 0.6})
    service = Service(backend.stores(), cfg, rng=random.Random(1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        with anyio.fail_after(5):
            while service.pauses is None or service.pauses.reads < 5:
                await anyio.sleep(0.02)
        assert "pauses" not in service.loops and service.loops["membership"]
        service.stop()
    assert calls.n["all"] == service.pauses.reads  # each read is a beat's (and the start-up one)


async def test_a_tenant_that_moved_to_another_replica_is_not_drained_here_any_more() -> None:
    """A backlog keeps a tenant woken batch after batch (and waiting for the worker's room); once
    the membership gives it to another replica, this one stops draining it: two replicas on one
    tenant only race for its cursor (the new owner's poll net takes it)."""
    backend = MemoryBackend()
    t = next(x for x in TENANTS if owner(("a", "b"), x) == "b")
    await backend.subs.put(Subscription(sub_id="s", tenant_id=t, bot="b"))
    await backend.board.put(Card(tenant_id=t, card_id="c"))
    for _ in range(5):
        await backend.events.emit(t, "card.created", "c")
    cfg = load_config(env={}, projections=[], tail={"seed": "earliest", "batch_size": 2})  # type: ignore[arg-type]
    a = Service(backend.stores(), cfg, rng=random.Random(1), member_id="a")
    a.wake_tenant(t)
    await a.drain_pass(False)  # alone: a owns it, drains a batch, more is behind
    assert await backend.cursors.get(t) == 2 and t in a.woken
    a._awaiting_room.add(t)
    assert a.ownership.set_members(["a", "b"])  # b joined: t is b's
    await a.drain_pass(False)
    a._room_again()
    assert await backend.cursors.get(t) == 2 and a.stats.last_drain == []
    assert t not in a.woken and t not in a._awaiting_room
