"""The event log and the tail's cursors: events as each tenant's seq orders them, and how far
the tail has turned them into rows."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Protocol

from board_outbox.model.records import EventRecord

__all__ = ["CursorStore", "EventLog"]


class EventLog(Protocol):
    async def allocate_seq(self, tenant_id: str) -> int:
        """Reserve the tenant's next seq ($inc on a counter). The insert comes later, or never."""
        ...

    async def insert(self, doc: Mapping[str, Any]) -> None:
        """Insert an event document carrying an allocated seq."""
        ...

    async def read_after(self, tenant_id: str, after_seq: int, limit: int) -> list[EventRecord]:
        """Up to ``limit`` inserted events with seq > after_seq, in seq order: the first
        ``limit`` of them, or (a backend reading a bounded seq window) those of the next
        ``limit`` seqs when any is there. Fewer than ``limit`` does not mean the log ends:
        only an empty answer does."""
        ...

    async def max_inserted_seq(self, tenant_id: str) -> int:
        """The highest seq actually inserted (0 if none) -- NOT the allocator counter."""
        ...

    async def allocated_seq(self, tenant_id: str) -> int:
        """The allocator counter (for lag metrics)."""
        ...

    async def seq_before(self, tenant_id: str, epoch: float) -> int:
        """The highest inserted seq whose event was written at or before ``epoch``
        (``model.epoch.written_before``; 0 if none): read from the top seq down, stopping at the
        first such event."""
        ...

    async def tenants(self) -> set[str]:
        """Tenants that have allocated at least one seq."""
        ...

    async def heads(self) -> dict[str, int]:
        """Every tenant's allocator counter, in one round trip (the O(1) poll net, S2)."""
        ...


class CursorStore(Protocol):
    async def get(self, tenant_id: str) -> int | None: ...

    async def epoch(self, now: float) -> float:
        """The store-wide epoch (``model/epoch.py``): written once at ``now`` ($setOnInsert) by
        the first caller, then returned as stored. Never a tenant's cursor (``all`` leaves it
        out)."""
        ...

    async def seed(self, tenant_id: str, value: int) -> int:
        """Create the cursor at ``value`` unless it exists; return the cursor's value."""
        ...

    async def compare_and_set(self, tenant_id: str, expected: int, new: int) -> bool:
        """Advance from ``expected`` to ``new``; False if another replica moved it first."""
        ...

    async def all(self) -> dict[str, int]:
        """Every tenant's cursor, in one round trip (the O(1) poll net, S2). A cursor document
        that does not parse is left out and reported (``BAD_DOCUMENTS``)."""
        ...

    async def seed_many(self, values: Mapping[str, int]) -> None:
        """``seed`` for many tenants in one bulk write (new tenants cost no round trip each)."""
        ...

    async def put(self, tenant_id: str, value: int) -> None:
        """Set the cursor unconditionally (and lift a hold): the operator's ``cursor reset``."""
        ...

    async def hold(self, tenant_id: str, cursor: int, counter: int) -> None:
        """Record on the cursor that it was found ahead of its counter (R2): the tenant stays
        held across restarts, even once the counter has caught up, until the cursor moves by
        ``compare_and_set`` or ``put`` (both lift the hold)."""
        ...

    async def holds(self, tenants: Collection[str] | None = None
                    ) -> dict[str, tuple[int, int]]:
        """Held tenants -> (cursor, counter when found), in one query (``tenants``: among
        those only, read by id)."""
        ...
