"""Issue 21: the readiness and stall comparisons at the exact instant (O1, O2), on an injected
clock. The documented side: a full poll pass is fresh while ``now - last_poll_ok <= 2 *
poll_interval + op_timeout``; a tenant is stalled once its cursor has been still (and behind) for
``stall_seconds``, that instant included."""

from __future__ import annotations

import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.clock import ManualClock
from board_outbox.service.config import load_config
from board_outbox.service.health import StallDetector
from board_outbox.service.runtime import Service
from board_outbox.surface.http.checks import readiness

pytestmark = pytest.mark.anyio


def _service(clock: ManualClock) -> Service:
    config = load_config(env={}, tail={"poll_interval_seconds": 10},
                         store={"op_timeout_seconds": 5})
    return Service(MemoryBackend().stores(), config, clock=clock)


async def test_a_poll_pass_is_fresh_until_exactly_its_window() -> None:
    clock = ManualClock(1000.0)
    service = _service(clock)
    service.loops = {"tail": True, "worker": True}  # no waker: only the poll net wakes
    assert "wake" in (await readiness(service))[0]  # no pass completed yet
    service.last_poll_ok = 1000.0
    assert await readiness(service) == ({}, [])
    clock.set(1000.0 + 2 * 10 + 5)  # exactly the window: still fresh
    assert await readiness(service) == ({}, [])
    clock.set(1000.0 + 2 * 10 + 5.25)
    failing, _ = await readiness(service)
    assert list(failing) == ["wake"]
    # an open change stream wakes the tail whatever the poll's age
    service.loops["waker"] = True
    service.stream_open = True
    assert await readiness(service) == ({}, [])


async def test_readiness_names_a_dead_loop_and_a_stalled_tenant() -> None:
    clock = ManualClock(1000.0)
    service = _service(clock)
    service.loops = {"tail": True, "worker": False}
    service.last_poll_ok = 1000.0
    failing, stalled = await readiness(service)
    assert failing == {"loops": "exited: worker"} and stalled == []


def test_a_tenant_is_stalled_at_exactly_stall_seconds() -> None:
    d = StallDetector(120)
    assert d.observe("t", 5, True, 1000.0) == 0.0  # behind, cursor at 5 since now
    assert d.observe("t", 5, True, 1119.5) == 0.0
    assert d.observe("t", 5, True, 1120.0) == 120.0  # still for exactly stall_seconds
    assert d.observe("t", 6, True, 1121.0) == 0.0  # moved: healthy again
    assert d.observe("t", 6, False, 1300.0) == 0.0  # caught up
