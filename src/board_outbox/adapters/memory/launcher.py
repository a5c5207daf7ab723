"""An in-memory launcher that records launches (tests and the demo)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from anyio.lowlevel import checkpoint

from board_outbox.adapters.memory.probes import FaultPoints, NoFaults
from board_outbox.model.errors import LaunchFailed
from board_outbox.ports import LaunchRequest


class MemoryLauncher:
    """Records launches. ``fail`` decides per request whether this launch attempt fails."""

    def __init__(
        self,
        faults: FaultPoints | None = None,
        fail: Callable[[LaunchRequest], bool] | None = None,
    ) -> None:
        self.faults: FaultPoints = faults or NoFaults()
        self.fail = fail
        self.launches: list[LaunchRequest] = []
        self.attempts = 0
        self._ids = itertools.count(1)

    async def launch(self, req: LaunchRequest) -> str:
        await checkpoint()
        self.attempts += 1
        self.faults.hit("launcher.launch")
        if self.fail is not None and self.fail(req):
            raise LaunchFailed(f"launcher refused {req.bot} for {req.row_key}")
        self.launches.append(req)
        self.faults.hit("launcher.launch.after")
        return f"launch-{next(self._ids)}"
