"""The in-memory change-feed resume token."""

from __future__ import annotations

from typing import Any

from anyio.lowlevel import checkpoint


class MemoryResumeTokenStore:
    def __init__(self) -> None:
        self.token: Any | None = None

    async def load(self) -> Any | None:
        await checkpoint()
        return self.token

    async def save(self, token: Any) -> None:
        await checkpoint()
        self.token = token

    async def clear(self) -> None:
        await checkpoint()  # a waker looping on clear() must still yield, so fail_after fires
        self.token = None
