"""The service's pause reads (F3, issue 33): once per membership heartbeat, riding the heartbeat's
own read of the members (S6: no round trip of their own), on a fixed cadence whatever a read
costs; without a membership, in a pause loop of their own at the same cadence. Neither loop ever
ends the service."""

from __future__ import annotations

import random
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service

pytestmark = pytest.mark.anyio


async def _run_with_slow(backend: MemoryBackend, service: Service, target: Any, name: str,
                         loop: str) -> None:
    real = getattr(target, name)

    async def slow(*args: Any) -> Any:
        await anyio.sleep(0.25)  # the heartbeat is 0.1 s
        return await real(*args)

    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        with anyio.fail_after(5):
            while not service.loops.get(loop):
                await anyio.sleep(0.01)
        assert service.pauses is not None
        reads = service.pauses.reads
        setattr(target, name, slow)
        await anyio.sleep(1.5)
        assert service.loops[loop]
        assert service.pauses.reads - reads >= 4  # about one every 0.25 s: back to back
        service.stop()


async def test_the_pauses_ride_the_heartbeat_which_keeps_its_cadence_through_slow_beats() -> None:
    """A beat that takes longer than the heartbeat interval is followed at once by the next one
    (never a negative sleep), each beat reads the pauses, and no read of their own is made:
    every read of the pause store is a beat's, but the start-up one."""
    backend = MemoryBackend()
    calls = {"all": 0, "beats": 0}
    real_all, real_beat = backend.pauses.all, backend.members.heartbeat_with_pauses

    async def all_() -> Any:
        calls["all"] += 1
        return await real_all()

    async def beat(*args: Any) -> Any:
        calls["beats"] += 1
        return await real_beat(*args)

    backend.pauses.all = all_  # type: ignore[method-assign]
    backend.members.heartbeat_with_pauses = beat  # type: ignore[method-assign]
    cfg = load_config(env={}, membership={"heartbeat_timeout_seconds": 0.6})
    service = Service(backend.stores(), cfg, rng=random.Random(1))
    await _run_with_slow(backend, service, backend.members, "heartbeat_with_pauses",
                         "membership")
    assert "pauses" not in service.loops  # no loop of their own
    assert calls["beats"] >= 4 and calls["all"] == calls["beats"] + 1  # + the start-up read


async def test_without_a_membership_the_pause_loop_keeps_its_cadence() -> None:
    backend = MemoryBackend()
    cfg = load_config(env={}, membership={"heartbeat_timeout_seconds": 0.6, "enabled": False})
    service = Service(backend.stores(), cfg, rng=random.Random(1))
    await _run_with_slow(backend, service, backend.pauses, "all", "pauses")
