"""The in-memory change-feed resume token."""

from __future__ import annotations

import time
from typing import Any

from anyio.lowlevel import checkpoint


class MemoryResumeTokenStore:
    def __init__(self) -> None:
        self.token: Any | None = None
        self.saved: float | None = None

    async def load(self) -> Any | None:
        await checkpoint()
        return self.token

    async def save(self, token: Any) -> None:
        await checkpoint()
        self.token = token
        self.saved = time.time()

    async def clear(self) -> None:
        await checkpoint()  # a waker looping on clear() must still yield, so fail_after fires
        self.token = None
        self.saved = None

    async def saved_at(self) -> float | None:
        await checkpoint()
        return self.saved
