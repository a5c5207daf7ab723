"""The demo's live summary line."""

from __future__ import annotations

import time
from typing import TextIO

from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.ports import Stores
from board_outbox.service.runtime import Service
from board_outbox.surface.demo.simulator import BoardSimulator


async def print_summary(
    stores: Stores, launcher: MemoryLauncher, done_by_kind: dict[str, int], service: Service,
    sim: BoardSimulator, started: float, out: TextIO,
) -> None:
    counts = await stores.outbox.count_by_state()
    st = service.stats
    print(
        f"[{time.monotonic() - started:5.1f}s] events {sim.emitted:6d} | materialized "
        f"{st.materialized:6d} | rows pending {counts.get('pending', 0):5d} claimed "
        f"{counts.get('claimed', 0):3d} done {counts.get('done', 0):6d} failed "
        f"{counts.get('failed', 0):3d} | launches {len(launcher.launches):5d} "
        f"(attempts {launcher.attempts}) | projection updates "
        f"{done_by_kind.get('projection', 0):6d} | notify {done_by_kind.get('notify', 0):4d} | wakes "
        f"stream {st.stream_wakes} poll "
        f"{st.poll_wakes}",
        file=out,
        flush=True,
    )
