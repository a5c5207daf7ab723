"""The readiness and stall comparisons at the exact instant (O1, O2), on an injected clock, and
what readiness is made of. The documented side: a full poll pass is fresh while ``now -
last_poll_ok <= 2 * poll_interval + op_timeout``; a tenant is stalled once its cursor has been
still (and behind) for ``stall_seconds``, that instant included. Readiness is "this replica can
serve"; what is wrong with some tenants (stalled, held) or with the stream (poll net alone) is
``degraded``, and never fails a probe."""

from __future__ import annotations

import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.clock import ManualClock
from board_outbox.service.config import load_config
from board_outbox.service.health import StallDetector, TenantStatus
from board_outbox.service.runtime import Service
from board_outbox.surface.http.checks import SHOWN, degraded, readiness
from board_outbox.surface.http.server import unreachable_probes

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


def _stalled(t: str) -> TenantStatus:
    return TenantStatus(tenant_id=t, cursor=3, allocated_seq=9, lag_events=6, lag_seconds=600.0,
                        oldest_pending_age_seconds=None, rows={}, dead_letters=0, stalled=True,
                        stalled_for_seconds=600.0)


async def test_stalled_and_held_tenants_and_a_closed_stream_are_degraded_never_unready() -> None:
    """Every replica sees the same tenants and the same store: a stalled tenant, a tenant held
    for a cursor ahead of its counter, or the stream on the poll net alone made /readyz fail on
    every pod at once. Now they are ``degraded`` and the replica stays ready."""
    clock = ManualClock(1000.0)
    service = _service(clock)
    service.loops = {"tail": True, "worker": True, "waker": True}
    service.last_poll_ok = 1000.0  # the poll net runs: events flow
    service.status = {"a": _stalled("a"), "b": _stalled("b")}
    service.tail.cursor_ahead = {"c": (50, 7)}
    service.stream_open, service.stream_down_since = False, 1000.0 - 60
    service.stream_down_reason = "refused"
    failing, stalled = await readiness(service)
    assert (failing, stalled) == ({}, ["a", "b"])
    assert degraded(service) == {
        "tail": "stalled tenants: a, b",
        "cursor": "cursor ahead of its counter (held until `cursor reset`): c (50 > 7)",
        "stream": "running on the poll net alone for 60s: change stream not open (refused)"}
    # what does fail it: this replica's own store and loops
    service.loops["worker"] = False
    assert (await readiness(service))[0] == {"loops": "exited: worker"}


async def test_the_degraded_detail_names_a_bounded_number_of_tenants() -> None:
    service = _service(ManualClock(1000.0))
    service.status = {f"t{i:04d}": _stalled(f"t{i:04d}") for i in range(SHOWN + 5)}
    text = degraded(service)["tail"]
    assert text.endswith(", t0099 and 5 more") and "t0100" not in text


async def test_a_replica_whose_loops_have_not_started_is_not_ready() -> None:
    service = _service(ManualClock(1000.0))
    failing, _ = await readiness(service)
    assert failing["loops"] == "not started"


def test_a_loopback_operator_port_inside_kubernetes_is_named() -> None:
    pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
        warning = unreachable_probes(host, pod)
        assert warning is not None and "BOARD_OUTBOX_SERVICE__HTTP_HOST=0.0.0.0" in warning, host
    assert unreachable_probes("0.0.0.0", pod) is None
    assert unreachable_probes("::", pod) is None
    assert unreachable_probes("10.1.2.3", pod) is None
    assert unreachable_probes("127.0.0.1", {}) is None  # not in a pod: loopback is the safe default
