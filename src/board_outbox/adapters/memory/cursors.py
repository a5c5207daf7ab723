"""In-memory ``trigger_cursors``."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from anyio.lowlevel import checkpoint

from board_outbox.model.epoch import epoch_at
from board_outbox.model.errors import StoreError
from board_outbox.model.service_documents import seqs_by_tenant
from board_outbox.model.validation import is_seq

CURSORS = "trigger_cursors"


class MemoryCursorStore:
    def __init__(self) -> None:
        self._cursors: dict[str, int] = {}
        self._held: dict[str, tuple[int, int]] = {}
        self.stored_epoch: object = None  # the epoch document's ``at``, as stored (a test may plant one)

    async def epoch(self, now: float) -> float:
        await checkpoint()
        if self.stored_epoch is None:
            self.stored_epoch = now
        return epoch_at({"at": self.stored_epoch}, now)

    async def get(self, tenant_id: str) -> int | None:
        await checkpoint()
        seq = self._cursors.get(tenant_id)
        if seq is not None and not is_seq(seq):  # as the Mongo adapter: a cursor is a true int
            raise StoreError(f"cursor of tenant {tenant_id!r}: seq {seq!r} is not an integer seq")
        return seq

    async def seed(self, tenant_id: str, value: int) -> int:
        await checkpoint()
        return self._cursors.setdefault(tenant_id, value)

    async def seed_many(self, values: Mapping[str, int]) -> None:
        await checkpoint()
        for tenant_id, value in values.items():
            self._cursors.setdefault(tenant_id, value)

    async def put(self, tenant_id: str, value: int) -> None:
        await checkpoint()
        self._cursors[tenant_id] = value
        self._held.pop(tenant_id, None)

    async def hold(self, tenant_id: str, cursor: int, counter: int) -> None:
        await checkpoint()
        if self._cursors.get(tenant_id) == cursor:
            self._held[tenant_id] = (cursor, counter)

    async def holds(self, tenants: Collection[str] | None = None
                    ) -> dict[str, tuple[int, int]]:
        await checkpoint()
        keep = None if tenants is None else set(tenants)
        return {t: h for t, h in self._held.items() if keep is None or t in keep}

    async def compare_and_set(self, tenant_id: str, expected: int, new: int) -> bool:
        await checkpoint()
        if self._cursors.get(tenant_id) != expected:
            return False
        self._cursors[tenant_id] = new
        self._held.pop(tenant_id, None)
        return True

    async def all(self) -> dict[str, int]:
        await checkpoint()
        return seqs_by_tenant(CURSORS, self._cursors.items())
