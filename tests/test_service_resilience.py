"""No error ends a running service (R1, and issue 9's "a replica exited with status 1 under
faults"): a non-transient store error, or any bug-shaped exception, in any loop is logged and the
loop carries on. Only the start-up preflight (the store unreachable or refusing us at start) ends
the process.

The loops are each hit on purpose: the drain pass, the worker tick, the metrics refresh and the
change-stream waker (its token load, its token drop after a lost stream, and the stream itself).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.model.errors import StoreError, StoreUnavailable
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service

pytestmark = pytest.mark.anyio
T = "t1"


def flaky(fn: Callable[..., Awaitable[Any]], errors: list[BaseException]) -> Callable[..., Any]:
    """Raise each of ``errors`` on successive calls, then behave."""
    left = list(errors)

    async def call(*a: Any, **kw: Any) -> Any:
        if left:
            raise left.pop(0)
        return await fn(*a, **kw)

    return call


async def run_until_launched(backend: MemoryBackend, service: Service, n: int) -> None:
    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            for _ in range(n):
                await backend.events.emit(T, "card.created", "c")
            while len(backend.launcher.launches) < n:
                await anyio.sleep(0.01)
            service.stop()


async def make(backend: MemoryBackend) -> Service:
    await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await backend.board.put(Card(tenant_id=T, card_id="c"))
    cfg = load_config(env={}, tail={"poll_interval_seconds": 0.05, "seed": "earliest"},
                      worker={"idle_seconds": 0.02}, service={"metrics_interval_seconds": 0.05})
    return Service(backend.stores(), cfg, rng=random.Random(1))


BAD = [StoreError("not authorized on board_outbox"), RuntimeError("a bug"),
       StoreUnavailable("blip"), ValueError("bad document")]


@pytest.mark.parametrize("where", [
    "events.read_after",      # the drain pass
    "outbox.claim_any",       # the worker tick
    "outbox.count_by_state",  # the metrics refresh
    "tokens.load",            # the waker's start
    "events.watch",           # the stream itself
])
async def test_errors_in_a_running_loop_are_ridden_out(where: str) -> None:
    backend = MemoryBackend()
    service = await make(backend)
    await service.preflight()  # the start-up check passes: the faults start after it
    holder, name = where.split(".")
    target = {"events": backend.events, "outbox": backend.outbox, "tokens": backend.tokens}[holder]
    if name == "watch":
        orig = target.watch
        left = list(BAD)

        async def watch(token: Any, **kw: Any) -> Any:
            if left:
                raise left.pop(0)
            async for ch in orig(token, **kw):
                yield ch

        target.watch = watch  # type: ignore[method-assign]
    else:
        setattr(target, name, flaky(getattr(target, name), list(BAD)))
    await run_until_launched(backend, service, 3)
    assert sorted(r.seq for r in backend.launcher.launches) == [1, 2, 3]


async def test_a_store_refusing_us_at_start_up_ends_the_run() -> None:
    backend = MemoryBackend()
    service = await make(backend)
    backend.subs.tenants = flaky(backend.subs.tenants, [StoreError("not authorized")])  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="not authorized"):
        await service.run()
