"""Backpressure on the wire (T1): a store that stops answering (``failCommand`` with
``blockConnection`` past the op timeout) drives a running service's factor down; once the store
answers again, the service is back at full speed within a bounded time, however rare its
stretched passes are.

Before, the factor grew one step per clean pass, and a backed-off idle replica stretched its
pauses by the factor (16 s at the floor): it sat near its floor for tens of seconds after the
store had recovered. Now recovery follows clean time and a stretched pause is at most
``MAX_STRETCHED_SECONDS``: from any factor, full speed within ``(1 - factor) / GROW`` cooldowns
of clean answers plus one stretched pause. And the events of the outage run within that bound:
an insert the store wrote after the tail had given up on it left its rows claimed for the worker
but unknown to it, for a whole lease; the next insert of them now adopts them.
"""

from __future__ import annotations

import random
import time

import anyio
import pytest

from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.adapters.mongo import mongo_stores
from board_outbox.engine.flow.pressure import COOLDOWN_SECONDS, GROW, MAX_STRETCHED_SECONDS
from board_outbox.model.board import Card
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from tests.test_wire_faults import TRANSIENT, FailPoints, Wire, failpoints, wire

pytestmark = [pytest.mark.anyio, pytest.mark.live_mongo]
__all__ = ["failpoints", "wire"]  # the fixtures, from the wire fault tests

T = "t1"
SLACK_SECONDS = 3.0  # scheduling on a loaded machine


async def test_backpressure_is_back_to_full_speed_soon_after_a_blocked_store_answers(
    wire: Wire, failpoints: FailPoints,
) -> None:
    launcher = MemoryLauncher()
    stores = mongo_stores(wire.db, launcher)
    await stores.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    for i in range(40):
        await stores.cards.put(Card(tenant_id=T, card_id=f"c{i}"))
    # a pass is slow only past 30 s: the factor moves on the store's timeouts alone, not on a
    # loaded machine's slow answers; the worker's pauses are the defaults
    cfg = load_config(env={}, tail={"seed": "earliest"},
                      service={"slow_store_seconds": 30.0})
    service = Service(stores, cfg, rng=random.Random(1))
    seq = 0

    async def emit() -> None:
        """An event, its seq allocated (the poll net sees it), written by a client the
        failpoints leave alone."""
        nonlocal seq
        seq += 1
        await wire.check["board_event_counters"].update_one(
            {"_id": T}, {"$set": {"seq": seq}}, upsert=True)
        await wire.check["board_events"].insert_one(
            {"tenant_id": T, "seq": seq, "type": "card.created", "card_id": f"c{seq % 40}",
             "at": 0.0})

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            await emit()
            while len(launcher.launches) < 1:
                await anyio.sleep(0.05)
            # the store stops answering the tail's and the worker's writes: their batches time
            # out, each a halving (one per cooldown)
            with failpoints.arm(["insert", "update"], TRANSIENT["blockConnection-past-timeout"]):
                deadline = time.monotonic() + 8.0
                while service.pressure.factor > 1 / 4 and time.monotonic() < deadline:
                    await emit()
                    await anyio.sleep(0.3)
            low = service.pressure.factor
            assert low <= 1 / 4, low  # the fault fired and the replica backed off
            answered = time.monotonic()
            # the store answers again: nothing more arrives, the replica idles on stretched
            # pauses; its factor must still come back within the bound
            while service.pressure.factor < 1.0:
                await anyio.sleep(0.05)
            took = time.monotonic() - answered
            bound = (1 - low) / GROW * COOLDOWN_SECONDS + MAX_STRETCHED_SECONDS + SLACK_SECONDS
            assert took <= bound, (took, bound, low)
            # full speed: claims and batches no longer cut (the claim itself follows the
            # backlog, MIN_CLAIM while idle), pauses no longer stretched, and every event of the
            # outage ran
            assert service.pressure.scale(cfg.worker.batch_size) == cfg.worker.batch_size
            assert service.tail.batch_limit() == service.tail.settings.batch_size
            assert service.pressure.stretch(cfg.worker.idle_seconds) == cfg.worker.idle_seconds
            while len(launcher.launches) < seq:
                await anyio.sleep(0.05)
            # within the bound too: rows an insert wrote after it had timed out were adopted by
            # the next insert of them, not left claimed until their lease (30 s) ran out
            drained = time.monotonic() - answered
            assert drained <= bound, (drained, bound)
            service.stop()
    assert sorted(r.seq for r in launcher.launches) == list(range(1, seq + 1))
    assert sum(wire.failures.failed_by_name.get(c, 0) for c in ("insert", "update")) >= 1
