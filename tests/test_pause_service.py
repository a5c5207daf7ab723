"""The service's pause loop (F3, issue 33): the pauses read once per membership heartbeat, on a
fixed cadence, whatever a read costs; the loop never ends the service."""

from __future__ import annotations

import random

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service

pytestmark = pytest.mark.anyio


async def test_the_pause_loop_keeps_its_cadence_through_reads_slower_than_a_heartbeat() -> None:
    """A pause read that takes longer than the heartbeat is followed at once by the next one
    (never a negative sleep: that ended the service), and the loop lives on."""
    backend = MemoryBackend()
    real = backend.pauses.all

    async def slow() -> list[object]:
        await anyio.sleep(0.25)  # the heartbeat is 0.1 s
        return await real()  # type: ignore[return-value]

    cfg = load_config(env={}, membership={"heartbeat_timeout_seconds": 0.6})
    service = Service(backend.stores(), cfg, rng=random.Random(1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        with anyio.fail_after(5):
            while not service.loops.get("pauses"):
                await anyio.sleep(0.01)
        backend.pauses.all = slow  # type: ignore[method-assign,assignment]
        await anyio.sleep(1.5)
        assert service.loops["pauses"] and service.pauses is not None
        assert service.pauses.reads >= 4  # about one every 0.25 s: back to back
        service.stop()
