"""Read-model generations: what makes a shadow rebuild (B3) invisible to readers.

Each (model, tenant) read model has a generation pointer (``ReadModelVersionStore``). Generation
0 is stored under the model's own name (so a read model written before generations existed is
generation 0); generation ``g > 0`` under ``"model#g"``. ``VersionedReadModels`` wraps the backend's
``ReadModelStore``:

- reads (``get``, ``list``) go to the **active** generation;
- writes (``upsert_if_newer``, ``write_many``) go to the active generation **and**, while a shadow
  rebuild runs, to the **building** one too: the service's projection rows keep the shadow
  current while the rebuild replays history into it (every write is guarded by seq, so the
  replay's writes and the rows' writes meet in any order);
- ``pinned(model, gen)`` is a view writing one generation only: the rebuild's replay target.

Every pointer is cached for ``ttl_seconds`` (one query for all of them per TTL, whatever the
tenant count, not a read per write); the rebuild waits that long after announcing the building
generation before it replays, so by then every writer writes both, and again after the swap
before it drops the old generation, so a reader with the old pointer still finds the old,
complete model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from board_outbox.model.clock import Clock
from board_outbox.model.errors import StoreError
from board_outbox.ports import (
    ReadModelOp,
    ReadModelStore,
    ReadModelVersions,
    ReadModelVersionStore,
    ReadModelWrites,
    Stores,
)

DEFAULT_TTL_SECONDS = 5.0
_DEFAULT = ReadModelVersions()


def physical(model: str, gen: int) -> str:
    """The name generation ``gen`` of ``model`` is stored under."""
    return model if gen == 0 else f"{model}#{gen}"


def _usable(model: str, tenant_id: str, v: ReadModelVersions) -> ReadModelVersions:
    """R1: a malformed pointer fails its own read model's reads and writes (the row retries,
    then parks), never another model's or tenant's: which generation is live is unknown."""
    if v.problem is not None:
        raise StoreError(f"generation pointer of {model}/{tenant_id} is malformed ({v.problem}): "
                         "fix or delete that read_model_versions document")
    return v


class VersionedReadModels:
    """A ``ReadModelStore`` that routes by generation (see the module docstring)."""

    def __init__(self, base: ReadModelStore, versions: ReadModelVersionStore, clock: Clock,
                 ttl_seconds: float = DEFAULT_TTL_SECONDS) -> None:
        self.base, self.versions, self.clock, self.ttl_seconds = base, versions, clock, ttl_seconds
        self._all: dict[tuple[str, str], ReadModelVersions] = {}
        self._loaded_at: float | None = None

    async def pointer(self, model: str, tenant_id: str, *, fresh: bool = False) -> ReadModelVersions:
        if fresh:
            v = await self.versions.get(model, tenant_id)
            self._all[(model, tenant_id)] = v
            return v
        now = self.clock.now()
        if self._loaded_at is None or now - self._loaded_at >= self.ttl_seconds:
            self._all = await self.versions.all()
            self._loaded_at = now
        return self._all.get((model, tenant_id), _DEFAULT)

    def forget(self, model: str, tenant_id: str) -> None:
        """Drop the cached pointers: the next read loads them all again."""
        self._loaded_at = None

    async def _targets(self, model: str, tenant_id: str) -> list[str]:
        v = await self.pointer(model, tenant_id)
        _usable(model, tenant_id, v)
        names = [physical(model, v.active)]
        if v.building is not None and v.building != v.active:
            names.append(physical(model, v.building))
        return names

    async def upsert_if_newer(
        self, model: str, tenant_id: str, key: str, seq: int, doc: Mapping[str, Any]
    ) -> bool:
        active, *shadow = await self._targets(model, tenant_id)
        fresh = await self.base.upsert_if_newer(active, tenant_id, key, seq, doc)
        for name in shadow:
            await self.base.upsert_if_newer(name, tenant_id, key, seq, doc)
        return fresh

    async def write_many(self, model: str, tenant_id: str, ops: Sequence[ReadModelOp]) -> list[bool]:
        active, *shadow = await self._targets(model, tenant_id)
        out = await self.base.write_many(active, tenant_id, ops)
        for name in shadow:
            await self.base.write_many(name, tenant_id, ops)
        return out

    async def write_groups(self, groups: Sequence[ReadModelWrites]) -> list[list[bool]]:
        """Every group to its active generation and, while one is built, its building one too,
        all in one bulk write of the base store."""
        active: list[ReadModelWrites] = []
        shadow: list[ReadModelWrites] = []
        for g in groups:
            first, *rest = await self._targets(g.model, g.tenant_id)
            active.append(ReadModelWrites(first, g.tenant_id, g.ops))
            shadow += [ReadModelWrites(name, g.tenant_id, g.ops) for name in rest]
        return (await self.base.write_groups(active + shadow))[:len(groups)]

    async def get(self, model: str, tenant_id: str, key: str) -> dict[str, Any] | None:
        v = _usable(model, tenant_id, await self.pointer(model, tenant_id))
        return await self.base.get(physical(model, v.active), tenant_id, key)

    async def list(self, model: str, tenant_id: str) -> list[dict[str, Any]]:
        v = _usable(model, tenant_id, await self.pointer(model, tenant_id))
        return await self.base.list(physical(model, v.active), tenant_id)

    async def reset(self, model: str, tenant_id: str) -> int:
        v = _usable(model, tenant_id, await self.pointer(model, tenant_id, fresh=True))
        return await self.base.reset(physical(model, v.active), tenant_id)

    def pinned(self, model: str, gen: int) -> PinnedReadModels:
        return PinnedReadModels(self.base, model, gen)


class PinnedReadModels:
    """``model`` pinned to one generation (reads and writes); other models pass through."""

    def __init__(self, base: ReadModelStore, model: str, gen: int) -> None:
        self.base, self.model, self.gen = base, model, gen

    def _name(self, model: str) -> str:
        return physical(model, self.gen) if model == self.model else model

    async def upsert_if_newer(
        self, model: str, tenant_id: str, key: str, seq: int, doc: Mapping[str, Any]
    ) -> bool:
        return await self.base.upsert_if_newer(self._name(model), tenant_id, key, seq, doc)

    async def write_many(self, model: str, tenant_id: str, ops: Sequence[ReadModelOp]) -> list[bool]:
        return await self.base.write_many(self._name(model), tenant_id, ops)

    async def write_groups(self, groups: Sequence[ReadModelWrites]) -> list[list[bool]]:
        return await self.base.write_groups(
            [ReadModelWrites(self._name(g.model), g.tenant_id, g.ops) for g in groups])

    async def get(self, model: str, tenant_id: str, key: str) -> dict[str, Any] | None:
        return await self.base.get(self._name(model), tenant_id, key)

    async def list(self, model: str, tenant_id: str) -> list[dict[str, Any]]:
        return await self.base.list(self._name(model), tenant_id)

    async def reset(self, model: str, tenant_id: str) -> int:
        return await self.base.reset(self._name(model), tenant_id)


def versioned(stores: Stores, clock: Clock, ttl_seconds: float = DEFAULT_TTL_SECONDS) -> Stores:
    """``stores`` with its read models wrapped in ``VersionedReadModels`` (once); unchanged when
    the backend keeps no generation pointers."""
    if stores.rm_versions is not None and not isinstance(stores.readmodels, VersionedReadModels):
        stores.readmodels = VersionedReadModels(stores.readmodels, stores.rm_versions, clock,
                                                ttl_seconds)
    return stores
