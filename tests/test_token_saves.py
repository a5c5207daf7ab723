"""Issue 21: the change stream's resume token saves, counted (S4): at most one per
``token_save_seconds`` while the stream runs, and the last token saved when the service stops."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.adapters.memory.tokens import MemoryResumeTokenStore
from board_outbox.model.board import Card
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service

pytestmark = pytest.mark.anyio
T = "t1"


class CountingTokens(MemoryResumeTokenStore):
    def __init__(self) -> None:
        super().__init__()
        self.saves: list[Any] = []

    async def save(self, token: Any) -> None:
        self.saves.append(token)
        await super().save(token)


async def eventually(cond: Callable[[], Awaitable[bool] | bool], timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while True:
            got = cond()
            if got if isinstance(got, bool) else await got:
                return
            await anyio.sleep(0.01)


async def _service(backend: MemoryBackend, token_save_seconds: float) -> Service:
    backend.tokens = CountingTokens()
    await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await backend.board.put(Card(tenant_id=T, card_id="c"))
    config = load_config(env={}, tail={"poll_interval_seconds": 60, "seed": "earliest",
                                       "token_save_seconds": token_save_seconds})
    return Service(backend.stores(), config, rng=random.Random(1))


async def _run_and_stop(backend: MemoryBackend, service: Service, events: int) -> None:
    """Start the service resuming after the first event (token 0), emit ``events`` more, wait
    until the waker has seen each one, then stop it and wait for the task group to end."""
    await backend.events.emit(T, "card.created", "c")
    # resume after the event already written (the feed's tokens count the subscription's write
    # too, which it carries): the stream sees the rest
    backend.tokens.token = start = backend.events.position()
    assert start == 1
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        for _ in range(events):
            await backend.events.emit(T, "card.created", "c")
        await eventually(lambda: service.stats.stream_wakes == events)
        service.stop()


async def test_token_saves_are_throttled_and_the_last_one_is_saved_at_stop() -> None:
    backend = MemoryBackend()
    service = await _service(backend, token_save_seconds=3600)
    await _run_and_stop(backend, service, events=4)
    tokens = backend.tokens
    assert isinstance(tokens, CountingTokens)
    # the first change is saved (no save yet in this window); the next three are within the
    # hour: not saved; on the way out the last one is
    assert tokens.saves == [2, 5]
    assert tokens.token == 5


async def test_a_stop_with_the_last_token_already_saved_writes_nothing_more() -> None:
    backend = MemoryBackend()
    service = await _service(backend, token_save_seconds=3600)
    await _run_and_stop(backend, service, events=1)
    tokens = backend.tokens
    assert isinstance(tokens, CountingTokens)
    assert tokens.saves == [2]


async def test_a_change_without_a_position_keeps_the_position_reached() -> None:
    """A change the feed delivers without a token (the "open" notice) says nothing about where
    the stream is: the token reached stays, it is what the next open and the stop save use."""
    from board_outbox.service.resume import ResumePoint

    store = CountingTokens()
    store.token = 7
    point = ResumePoint(store, every_seconds=3600, now=lambda: 0.0)
    assert await point.load() == 7
    point.reached(None)  # before any change: still the stored position
    assert await point.load() == 7
    point.reached(9)
    point.reached(None)
    assert point.token == 9 and await point.load() == 9
    assert await point.save(force=True) and store.saves == [9]
    point.reached(None)
    assert not await point.save(force=True)  # nothing new reached: nothing written
    assert store.token == 9
