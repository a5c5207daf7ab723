"""F2, issue 30: an in-flight slot lives exactly as long as its launch. The ``LimitStore``
contract for ``renew`` (fenced on the holder) and ``upkeep`` on every backend; the worker's lease
heartbeat renewing a running launch's slots; a launch cut when its slot ends under it (taken
over, or not renewed by its end), its slots given back in every outcome."""

from __future__ import annotations

import math

import pytest

from board_outbox.ports import LimitStore
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

T = "t1"
K = "bot:t1/b"


def _t0(kit: Kit) -> float:
    return math.floor(kit.clock.now() / 10) * 10.0


def _limits(kit: Kit) -> LimitStore:
    assert kit.limits is not None
    return kit.limits


# --- the store contract ---------------------------------------------------------------------


async def test_only_its_holder_renews_a_slot(kit: Kit) -> None:
    lim, t0 = _limits(kit), _t0(kit)
    assert await lim.acquire(K, 1, "a", until=t0 + 50, now=t0)
    assert not await lim.renew(K, "b", until=t0 + 500)  # not b's: nothing written
    assert await lim.acquire(K, 1, "b", until=t0 + 300, now=t0 + 50)  # a's end stood at 50
    assert not await lim.renew(K, "a", until=t0 + 60)  # taken over: a renews nothing back
    # b's slot still ends at 300: a's refused renewal neither took it nor cut it to 60
    assert not await lim.acquire(K, 1, "a", until=t0 + 400, now=t0 + 100)
    assert not await lim.acquire(K, 1, "c", until=t0 + 400, now=t0 + 299)
    assert await lim.acquire(K, 1, "c", until=t0 + 400, now=t0 + 300)


async def test_a_renewed_slot_ends_at_its_new_end(kit: Kit) -> None:
    lim, t0 = _limits(kit), _t0(kit)
    assert await lim.acquire(K, 1, "a", until=t0 + 50, now=t0)
    assert await lim.acquire("bot:t1/other", 1, "a", until=t0 + 50, now=t0)
    assert await lim.renew(K, "a", until=t0 + 150)
    assert not await lim.acquire(K, 1, "b", until=t0 + 300, now=t0 + 100)  # still a's
    # only the key renewed moved: the holder's slot of another key ends where it did
    assert await lim.acquire("bot:t1/other", 1, "b", until=t0 + 300, now=t0 + 50)
    assert await lim.acquire(K, 1, "b", until=t0 + 300, now=t0 + 150)  # at its new end


async def test_a_released_slot_is_not_renewed(kit: Kit) -> None:
    lim, t0 = _limits(kit), _t0(kit)
    assert await lim.acquire(K, 1, "a", until=t0 + 50, now=t0)
    await lim.release(K, "a")
    assert not await lim.renew(K, "a", until=t0 + 150)  # a late beat after the launch ended
    assert await lim.acquire(K, 1, "b", until=t0 + 20, now=t0 + 1)  # free, not re-held by a
    await lim.release(K, "b")
    assert not await lim.renew(K, "b", until=t0 + 150)
    assert await lim.acquire(K, 1, "c", until=t0 + 30, now=t0 + 2)


async def test_upkeep_recreates_the_limits_indexes_after_a_drop(kit: Kit) -> None:
    lim, t0 = _limits(kit), _t0(kit)
    assert await lim.upkeep() == []  # all there (created at start): nothing to do
    if kit.drop_limits is None or kit.limit_indexes is None:  # a dict has no indexes to lose
        assert await lim.acquire(K, 1, "a", until=t0 + 50, now=t0)
        return
    wanted = {"key_holder", "expire_ttl"}
    assert wanted <= await kit.limit_indexes()
    await kit.drop_limits()
    assert await lim.acquire(K, 1, "a", until=t0 + 50, now=t0)  # the upsert makes it again...
    assert not wanted & await kit.limit_indexes()  # ... without its indexes
    assert sorted(await lim.upkeep()) == sorted(wanted)
    assert wanted <= await kit.limit_indexes()
    assert await lim.upkeep() == []
    assert not await lim.acquire(K, 1, "b", until=t0 + 50, now=t0 + 1)  # the slot survived
