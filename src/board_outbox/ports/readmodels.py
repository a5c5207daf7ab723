"""The projections' read models and the generation pointer a shadow rebuild flips."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from board_outbox.model.records import ReadModelVersions, ReadModelWrites
from board_outbox.ports.values import ReadModelOp

__all__ = ["ReadModelStore", "ReadModelVersionStore"]


class ReadModelStore(Protocol):
    """Documents of projection read models, keyed (model, tenant, key), guarded by seq so that
    applying an older or repeated event is a no-op (projection rows run in any order)."""

    async def upsert_if_newer(
        self, model: str, tenant_id: str, key: str, seq: int, doc: Mapping[str, Any]
    ) -> bool: ...

    async def write_many(
        self, model: str, tenant_id: str, ops: Sequence[ReadModelOp]
    ) -> list[bool]:
        """Apply a batch of writes in one bulk write (Mongo: one unordered ``bulk_write``); for
        each op, True if it changed the model, False if it was stale or already applied."""
        ...

    async def write_groups(self, groups: Sequence[ReadModelWrites]) -> list[list[bool]]:
        """``write_many`` for several (model, tenant) read models at once, in one bulk write
        (Mongo: one unordered ``bulk_write`` for every group's ops): a claimed batch's rows of
        one projection across tenants. Per group, per op, what ``write_many`` says."""
        ...

    async def get(self, model: str, tenant_id: str, key: str) -> dict[str, Any] | None: ...

    async def list(self, model: str, tenant_id: str) -> list[dict[str, Any]]: ...

    async def reset(self, model: str, tenant_id: str) -> int: ...


class ReadModelVersionStore(Protocol):
    """One small document per (model, tenant) read model: the generation pointer a shadow rebuild
    (B3) flips in one compare-and-set."""

    async def get(self, model: str, tenant_id: str) -> ReadModelVersions: ...

    async def all(self) -> dict[tuple[str, str], ReadModelVersions]:
        """Every pointer, keyed (model, tenant), in one query (only read models that were ever
        shadow-rebuilt have one): what a replica caches."""
        ...

    async def compare_and_set(self, model: str, tenant_id: str, expected: ReadModelVersions,
                              new: ReadModelVersions) -> bool:
        """Replace the pointer by ``new`` only if it still equals ``expected`` (a missing
        document equals the default ``ReadModelVersions()``)."""
        ...
