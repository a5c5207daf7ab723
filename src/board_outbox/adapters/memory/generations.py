"""In-memory read-model generation pointers (B3 shadow rebuilds)."""

from __future__ import annotations

from anyio.lowlevel import checkpoint

from board_outbox.ports import ReadModelVersions


class MemoryGenerationStore:
    def __init__(self) -> None:
        self._docs: dict[tuple[str, str], ReadModelVersions] = {}

    async def get(self, model: str, tenant_id: str) -> ReadModelVersions:
        await checkpoint()
        return self._docs.get((model, tenant_id), ReadModelVersions())

    async def all(self) -> dict[tuple[str, str], ReadModelVersions]:
        await checkpoint()
        return dict(self._docs)

    async def compare_and_set(self, model: str, tenant_id: str, expected: ReadModelVersions,
                              new: ReadModelVersions) -> bool:
        await checkpoint()
        if self._docs.get((model, tenant_id), ReadModelVersions()) != expected:
            return False
        self._docs[(model, tenant_id)] = new
        return True
