"""In-memory ``trigger_cursors``."""

from __future__ import annotations

from anyio.lowlevel import checkpoint

from board_outbox.model.errors import StoreError
from board_outbox.model.validation import is_seq


class MemoryCursorStore:
    def __init__(self) -> None:
        self._cursors: dict[str, int] = {}

    async def get(self, tenant_id: str) -> int | None:
        await checkpoint()
        seq = self._cursors.get(tenant_id)
        if seq is not None and not is_seq(seq):  # as the Mongo adapter: a cursor is a true int
            raise StoreError(f"cursor of tenant {tenant_id!r}: seq {seq!r} is not an integer seq")
        return seq

    async def seed(self, tenant_id: str, value: int) -> int:
        await checkpoint()
        return self._cursors.setdefault(tenant_id, value)

    async def compare_and_set(self, tenant_id: str, expected: int, new: int) -> bool:
        await checkpoint()
        if self._cursors.get(tenant_id) != expected:
            return False
        self._cursors[tenant_id] = new
        return True

    async def all(self) -> dict[str, int]:
        await checkpoint()
        return dict(self._cursors)
