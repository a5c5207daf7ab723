"""``board-outbox demo``: the whole pipeline with a synthetic board, on a real MongoDB-wire server
by default (SecantusDB's ``secantusd-py`` started as a child process, temp storage) or on the
in-memory twin (``--store memory``).

A generator plays a board (cards created, moved, labelled, retitled, deleted) across a few
tenants with four subscriptions each (three launch bots, and one of the user effect kind
``notify``, run by the example handler in ``notify.py``), while the service runs its
change-stream waker, drain loop and effect worker. A flaky launcher fails a share of launches
so retries and backoff show. A live summary prints as it goes; at the end the run is checked
through the ports: every event materialized, every row settled, no row launched twice, the
board-reflect read model equal to the cards, every notify row done by its handler; and the
throughput is printed.
"""

from __future__ import annotations

import random
import sys
import time
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TextIO

import anyio

from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.model.domain import EffectRow
from board_outbox.ports import Stores
from board_outbox.service.config import load_config
from board_outbox.service.config_sections import Config
from board_outbox.service.runtime import Service
from board_outbox.service.wireserver import WireServer, WireServerUnavailable
from board_outbox.surface.demo.check import verify
from board_outbox.surface.demo.notify import KIND as NOTIFY
from board_outbox.surface.demo.notify import TOPIC as NOTIFY_TOPIC
from board_outbox.surface.demo.simulator import BoardSimulator, demo_subscriptions
from board_outbox.surface.demo.summary import print_summary

STORES = ("embedded", "memory")


@dataclass
class DemoOptions:
    tenants: int = 3
    events: int = 1000
    rate: float = 1500.0  # events per second the generator aims at
    failure_rate: float = 0.1
    seed: int = 7
    interval: float = 0.5
    timeout: float = 180.0
    store: str = "embedded"  # embedded | memory
    storage: str | None = None  # embedded: keep the server's data here (default: a temp dir)
    projections: tuple[str, ...] = ()  # run besides board-reflect (names, topics, entry points)


def _memory_stores(launcher: MemoryLauncher) -> AbstractAsyncContextManager[Stores]:
    from board_outbox.adapters.memory import open_stores

    return open_stores(launcher=launcher)


def _wire_stores(server: WireServer, launcher: MemoryLauncher) -> AbstractAsyncContextManager[Stores]:
    from board_outbox.adapters.mongo import open_stores

    return open_stores(launcher=launcher, uri=server.uri, app_name="board-outbox-demo",
                       database=f"board_outbox_demo_{int(time.time())}", ensure_schema=True)


async def run_demo(
    opts: DemoOptions, out: TextIO | None = None, config: Config | None = None
) -> int:
    out = out or sys.stdout
    if opts.store == "embedded":
        server = WireServer(storage=opts.storage)
        try:
            await anyio.to_thread.run_sync(server.start)
        except WireServerUnavailable as exc:
            print(f"board-outbox demo: the embedded wire server could not start ({exc}); "
                  "falling back to the in-memory backend", file=out)
            await anyio.to_thread.run_sync(server.close)
        else:
            try:
                info = await anyio.to_thread.run_sync(server.info)
                where = (f"{info['server']} {info['server_version']} wire server at "
                         f"{info['address']}, pymongo, change streams")
                launcher = MemoryLauncher()
                async with _wire_stores(server, launcher) as stores:
                    return await _run(opts, stores, launcher, where, out, config)
            finally:
                await anyio.to_thread.run_sync(server.close)
    launcher = MemoryLauncher()
    async with _memory_stores(launcher) as stores:
        return await _run(opts, stores, launcher, "in-memory backend", out, config)


async def _run(
    opts: DemoOptions, stores: Stores, launcher: MemoryLauncher, where: str, out: TextIO,
    config: Config | None,
) -> int:
    rng = random.Random(opts.seed)
    launcher.fail = lambda _req: rng.random() < opts.failure_rate
    tenants = [f"tenant-{i + 1}" for i in range(opts.tenants)]
    subs = {t: demo_subscriptions(t) for t in tenants}
    for t in tenants:
        for sub in subs[t]:
            await stores.subs.put(sub)
    cfg = config or load_config(
        env={},
        tail={"poll_interval_seconds": 0.5, "seed": "earliest"},
        worker={"backoff_base_seconds": 0.05, "backoff_cap_seconds": 1.0, "idle_seconds": 0.05,
                "max_attempts": 10, "batch_size": 50},
        service={"shutdown_grace_seconds": 2.0},
        projections=["board-reflect", *opts.projections],
        handlers={NOTIFY: NOTIFY_TOPIC},  # the demo's user effect kind, as a deployment adds one
    )
    done_by_kind: dict[str, int] = {}

    def on_done(row: EffectRow, _outcome: str) -> None:
        done_by_kind[row.kind] = done_by_kind.get(row.kind, 0) + 1

    service = Service(stores, cfg, rng=random.Random(opts.seed + 1), on_done=on_done)
    sim = BoardSimulator(stores, tenants, rng)
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
        counts = await stores.outbox.count_by_state()
        pending = counts.get("pending", 0) + counts.get("claimed", 0)
        behind = 0
        for t in tenants:
            cur = await stores.cursors.get(t) or 0
            behind += (await stores.events.max_inserted_seq(t)) - cur
        return state["phase"] == "draining" and pending == 0 and behind == 0

    kinds = sorted({s.kind for ss in subs.values() for s in ss})
    print(
        f"board-outbox demo: {opts.tenants} tenants x {len(subs[tenants[0]]) if tenants else 0} "
        f"subscriptions (kinds {', '.join(kinds)}), {opts.events} events, "
        f"launcher failure rate {opts.failure_rate:.0%} ({where})",
        file=out,
    )
    timed_out = False
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        tg.start_soon(generate)
        while True:
            await anyio.sleep(opts.interval)
            await print_summary(stores, launcher, done_by_kind, service, sim, started, out)
            if await settled():
                break
            if time.monotonic() - started > opts.timeout:
                timed_out = True
                break
        service.stop()
    elapsed = time.monotonic() - started
    return await verify(stores, launcher, service, tenants, sim, out, timed_out, elapsed)
