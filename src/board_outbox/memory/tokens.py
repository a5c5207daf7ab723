"""The in-memory change-feed resume token."""

from __future__ import annotations

from typing import Any


class MemoryResumeTokenStore:
    def __init__(self) -> None:
        self.token: Any | None = None

    async def load(self) -> Any | None:
        return self.token

    async def save(self, token: Any) -> None:
        self.token = token

    async def clear(self) -> None:
        self.token = None
