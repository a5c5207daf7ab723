"""Round trips of one drain pass over a backlog: the cursor and the subscriptions are read once
per tenant per pass, not once per batch; a replica that moves the cursor meanwhile only makes
our CAS fail (M1 holds)."""

from __future__ import annotations

from typing import Any

import pytest

from board_outbox.model.subscriptions import Subscription
from tests.support.kits import memory_kit

pytestmark = pytest.mark.anyio
T = "t1"


class Counting:
    def __init__(self, target: Any, calls: dict[str, int]) -> None:
        self._t, self._calls = target, calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._t, name)
        if not callable(attr):
            return attr

        async def call(*a: Any, **kw: Any) -> Any:
            self._calls[name] = self._calls.get(name, 0) + 1
            return await attr(*a, **kw)

        return call


async def test_a_backlog_pass_reads_cursor_and_subscriptions_once() -> None:
    kit = memory_kit()
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await kit.card(T, "c")
    for _ in range(1000):
        await kit.emit(T, "card.created", "c")
    calls: dict[str, int] = {}
    kit.cursors = Counting(kit.cursors, calls)  # type: ignore[assignment]
    kit.subs = Counting(kit.subs, calls)  # type: ignore[assignment]
    tail = kit.tail(seed="earliest", batch_size=100)
    await tail.cursor(T)
    calls.clear()
    results = await tail.drain_all([T])
    assert sum(r.materialized for r in results) == 1000 and await kit.cursors.get(T) == 1000
    assert calls["list_for_tenant"] == 1
    assert calls["get"] == 1 + 1  # once for the pass, once by the check above
    assert calls["compare_and_set"] == 10  # one CAS per batch, as before


async def test_a_cursor_moved_mid_pass_makes_our_cas_fail_and_loses_nothing() -> None:
    kit = memory_kit()
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await kit.card(T, "c")
    for _ in range(300):
        await kit.emit(T, "card.created", "c")
    tail = kit.tail(seed="earliest", batch_size=100)
    other = kit.tail(seed="earliest", batch_size=100)
    await tail.cursor(T)
    first = await tail.drain_tenant(T)  # not in a pass: nothing cached
    assert first.cursor_after == 100
    # a pass: after its first batch another replica races ahead
    orig = kit.cursors.compare_and_set
    raced = False

    async def cas(tenant: str, expected: int, new: int) -> bool:
        nonlocal raced
        ok = await orig(tenant, expected, new)
        if ok and not raced:
            raced = True
            await other.drain_tenant(T)  # moves the cursor on behind our back
        return ok

    kit.cursors.compare_and_set = cas  # type: ignore[method-assign]
    results = await tail.drain_all([T])
    assert any(r.stopped == "cas_lost" for r in results)
    await tail.drain_all([T])
    assert await kit.cursors.get(T) == 300
    rows = await kit.rows(T)
    assert sorted(r.seq for r in rows) == list(range(1, 301))  # once each
