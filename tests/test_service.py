"""The runtime: change-feed wake with the polling net (C1, on the memory change feed),
and graceful shutdown (C4)."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.engine.handlers.registry import ExecutionContext
from board_outbox.engine.work.claiming import MIN_CLAIM
from board_outbox.model.board import Card
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from tests.support.faults import FaultInjector

pytestmark = pytest.mark.anyio
T = "t1"


async def eventually(cond: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not await cond():
            await anyio.sleep(0.01)


async def setup(backend: MemoryBackend, **cfg: object) -> Service:
    await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await backend.board.put(Card(tenant_id=T, card_id="c"))
    config = load_config(env={}, **cfg)  # type: ignore[arg-type]
    return Service(backend.stores(), config, rng=random.Random(1))


def rows(backend: MemoryBackend, state: str | None = None) -> list[dict[str, object]]:
    return [d for d in backend.outbox.all_docs()
            if d.get("kind") == "launch" and (state is None or d.get("state") == state)]


async def test_change_feed_wakes_the_tail_long_before_the_poll(  ) -> None:
    backend = MemoryBackend()
    service = await setup(backend, tail={"poll_interval_seconds": 60, "seed": "earliest"})
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await anyio.sleep(0.05)  # the first full poll has run; the next is 60 s away
        await backend.events.emit(T, "card.created", "c")
        await eventually(lambda: _count(backend, "done", 1), timeout=2.0)
        assert service.stats.stream_wakes == 1 and service.stats.poll_wakes == 1
        assert backend.tokens.token is not None  # the resume token is persisted
        service.stop()


async def _count(backend: MemoryBackend, state: str, n: int) -> bool:
    return len(rows(backend, state)) == n


async def test_without_change_feed_only_the_poll_finds_events() -> None:
    backend = MemoryBackend()
    service = await setup(backend, tail={"poll_interval_seconds": 0.3, "seed": "earliest",
                                         "change_streams": False})
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await anyio.sleep(0.05)
        await backend.events.emit(T, "card.created", "c")
        await anyio.sleep(0.1)
        assert rows(backend) == []  # no stream: nothing until the next poll
        await eventually(lambda: _count(backend, "done", 1), timeout=2.0)
        assert service.stats.stream_wakes == 0 and service.stats.poll_wakes >= 2
        service.stop()


async def test_lost_stream_history_drops_token_polls_and_reopens() -> None:
    """The events only the catch-up poll can find: inserted AFTER the startup poll, while the
    stream is down, then the history is lost. The next poll is 60 s away, so without the poll
    that follows ChangeStreamLost they would stay unmaterialized."""
    backend = MemoryBackend(faults=FaultInjector())
    backend.events.quiet_seconds = 60  # no quiet-stretch token: the dropped token stays dropped
    service = await setup(backend, tail={"poll_interval_seconds": 60, "seed": "earliest"})
    await backend.events.emit(T, "card.created", "c")  # seq 1, after the subscription's write
    await backend.tokens.save(backend.events.position())
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await eventually(lambda: _count(backend, "done", 1))  # the startup poll found seq 1
        assert service.stats.poll_wakes == 1
        # the stream breaks at its next change: seq 2 is not delivered, the token stays at seq 1's
        backend.faults.fail_at("changefeed.next")
        await backend.events.emit(T, "card.created", "c")  # seq 2
        await backend.events.emit(T, "card.created", "c")  # seq 3
        backend.events.forget_history()  # ... and the oplog rolls over before it resumes
        await eventually(lambda: _count(backend, "done", 3))  # only the catch-up poll finds them
        assert service.stats.stream_reopens == 2  # the interruption, then the lost history
        assert service.stats.stream_wakes == 0 and service.stats.poll_wakes == 2
        assert backend.tokens.token is None  # the stale token was dropped
        await backend.events.emit(T, "card.created", "c")  # the reopened stream wakes the tail
        await eventually(lambda: _count(backend, "done", 4), timeout=2.0)
        # plus one reconciling poll once the new stream delivers (it covers inserts between the
        # loss and the reopen)
        assert service.stats.stream_wakes == 1 and service.stats.poll_wakes == 3
        service.stop()


async def test_transient_stream_error_resumes_from_token_without_loss() -> None:
    backend = MemoryBackend(faults=FaultInjector())
    service = await setup(backend, tail={"poll_interval_seconds": 60, "seed": "earliest"})
    backend.faults.fail_at("changefeed.next", nth=2)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await anyio.sleep(0.05)
        for _ in range(3):
            await backend.events.emit(T, "card.created", "c")
        await eventually(lambda: _count(backend, "done", 3), timeout=3.0)
        assert backend.faults.fired["changefeed.next"] == 1
        assert service.stats.stream_reopens == 1
        service.stop()


async def test_graceful_shutdown_finishes_in_flight_and_releases_the_rest() -> None:
    backend = MemoryBackend()
    service = await setup(
        backend, tail={"poll_interval_seconds": 60, "seed": "earliest"},
        worker={"batch_size": 5}, service={"shutdown_grace_seconds": 5},
    )
    entered, proceed = anyio.Event(), anyio.Event()

    class Slow:
        async def execute(self, row: EffectRow, ctx: ExecutionContext) -> str:
            entered.set()
            await proceed.wait()
            return "ok"

    service.registry.register("launch", Slow(), replace=True)
    for _ in range(5):
        await backend.events.emit(T, "card.created", "c")
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await entered.wait()
        service.stop()
        await anyio.sleep(0.05)
        proceed.set()
    done, pending = rows(backend, "done"), rows(backend, "pending")
    assert len(done) == 1 and len(pending) == 4  # in-flight finished, the rest given back
    assert all(d["claim_id"] is None and d.get("attempts", 0) == 0 for d in pending)
    # every claimed row it had not started went back (the claim may be smaller than batch_size:
    # idle ticks before the events shrink it toward MIN_CLAIM; the rows still in the hand-off go
    # back too, uncounted here); the projection rows ran in a lane of their own, not behind the
    # slow launch
    w = service.stats.worker
    assert w.claimed >= MIN_CLAIM and w.released >= 1 and w.claimed == w.done + w.released


async def test_shutdown_past_grace_releases_the_interrupted_row() -> None:
    backend = MemoryBackend()
    service = await setup(backend, tail={"poll_interval_seconds": 60, "seed": "earliest"},
                          service={"shutdown_grace_seconds": 0.1})
    entered = anyio.Event()

    class Hung:
        async def execute(self, row: EffectRow, ctx: ExecutionContext) -> str:
            entered.set()
            await anyio.sleep_forever()
            raise AssertionError

    service.registry.register("launch", Hung(), replace=True)
    await backend.events.emit(T, "card.created", "c")
    with anyio.fail_after(3):
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            await entered.wait()
            service.stop()
    (row,) = rows(backend)
    assert row["state"] == "pending" and row["claim_id"] is None
