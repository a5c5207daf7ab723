from __future__ import annotations

from typing import Any

from anyio.lowlevel import checkpoint


class MemoryCursorStore:
    def __init__(self) -> None:
        self._cursors: dict[str, int] = {}

    async def get(self, tenant_id: str) -> int | None:
        await checkpoint()
        return self._cursors.get(tenant_id)

    async def seed(self, tenant_id: str, value: int) -> int:
        await checkpoint()
        return self._cursors.setdefault(tenant_id, value)

    async def compare_and_set(self, tenant_id: str, expected: int, new: int) -> bool:
        await checkpoint()
        if self._cursors.get(tenant_id) != expected:
            return False
        self._cursors[tenant_id] = new
        return True


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
