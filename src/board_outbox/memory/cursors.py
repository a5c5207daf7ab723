"""In-memory ``trigger_cursors``."""

from __future__ import annotations

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
