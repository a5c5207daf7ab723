"""The demo's live summary line."""

from __future__ import annotations

import time
from typing import TextIO

from ..memory import MemoryBackend
from ..runtime import Service
from .simulator import BoardSimulator


async def print_summary(
    backend: MemoryBackend, service: Service, sim: BoardSimulator, started: float, out: TextIO
) -> None:
    counts = await backend.outbox.count_by_state()
    proj = sum(1 for r in backend.outbox.all_docs()
               if r.get("kind") == "projection" and r.get("state") == "done")
    st = service.stats
    print(
        f"[{time.monotonic() - started:5.1f}s] events {sim.emitted:6d} | materialized "
        f"{st.materialized:6d} | rows pending {counts.get('pending', 0):5d} claimed "
        f"{counts.get('claimed', 0):3d} done {counts.get('done', 0):6d} failed "
        f"{counts.get('failed', 0):3d} | launches {len(backend.launcher.launches):5d} "
        f"(attempts {backend.launcher.attempts}) | projection updates {proj:6d} | wakes "
        f"stream {st.stream_wakes} poll {st.poll_wakes}",
        file=out,
        flush=True,
    )
