"""``board-outbox demo``: the whole pipeline on the in-memory backend with a synthetic board.

A generator plays a board (cards created, moved, labelled, retitled, deleted) across a few
tenants with three subscriptions each, while the service runs its change-feed waker, drain loop
and effect worker. A flaky launcher fails a share of launches so retries and backoff show. A live
summary prints as it goes; at the end the run is checked: every event materialized, every row
settled, no row launched twice, the board-reflect read model equal to the cards.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass
from typing import TextIO

import anyio

from ..config import Config, load_config
from ..memory import MemoryBackend
from ..ports import Stores
from ..runtime import Service
from .check import verify
from .simulator import BoardSimulator, demo_subscriptions
from .summary import print_summary


@dataclass
class DemoOptions:
    tenants: int = 3
    events: int = 3000
    rate: float = 1500.0  # events per second the generator aims at
    failure_rate: float = 0.1
    seed: int = 7
    interval: float = 0.5
    timeout: float = 60.0
    projections: tuple[str, ...] = ()  # run besides board-reflect (names, topics, entry points)


def stores_for(backend: MemoryBackend) -> Stores:
    return backend.stores()


async def run_demo(
    opts: DemoOptions, out: TextIO | None = None, config: Config | None = None
) -> int:
    out = out or sys.stdout
    rng = random.Random(opts.seed)
    backend = MemoryBackend()
    backend.launcher.fail = lambda _req: rng.random() < opts.failure_rate
    tenants = [f"tenant-{i + 1}" for i in range(opts.tenants)]
    for t in tenants:
        for sub in demo_subscriptions(t):
            await backend.subs.put(sub)
    cfg = config or load_config(
        env={},
        tail={"poll_interval_seconds": 0.5, "seed": "earliest"},
        worker={"backoff_base_seconds": 0.05, "backoff_cap_seconds": 1.0, "idle_seconds": 0.05,
                "max_attempts": 10, "batch_size": 50},
        service={"shutdown_grace_seconds": 2.0},
        projections=["board-reflect", *opts.projections],
    )
    service = Service(stores_for(backend), cfg, rng=random.Random(opts.seed + 1))
    sim = BoardSimulator(backend, tenants, rng)
    started = time.monotonic()
    state: dict[str, object] = {"phase": "generating"}

    async def generate() -> None:
        per_step = 1.0 / opts.rate if opts.rate > 0 else 0.0
        for i in range(opts.events):
            await sim.step()
            if per_step and i % 50 == 49:
                lag = started + (i + 1) * per_step - time.monotonic()
                await anyio.sleep(max(0.0, lag))
        state["phase"] = "draining"

    async def settled() -> bool:
        counts = await backend.outbox.count_by_state()
        pending = counts.get("pending", 0) + counts.get("claimed", 0)
        behind = 0
        for t in tenants:
            cur = await backend.cursors.get(t) or 0
            behind += (await backend.events.max_inserted_seq(t)) - cur
        return state["phase"] == "draining" and pending == 0 and behind == 0

    print(
        f"board-outbox demo: {opts.tenants} tenants x 3 subscriptions, {opts.events} events, "
        f"launcher failure rate {opts.failure_rate:.0%} (in-memory backend)",
        file=out,
    )
    timed_out = False
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        tg.start_soon(generate)
        while True:
            await anyio.sleep(opts.interval)
            await print_summary(backend, service, sim, started, out)
            if await settled():
                break
            if time.monotonic() - started > opts.timeout:
                timed_out = True
                break
        service.stop()
    return await verify(backend, service, tenants, sim, out, timed_out)
