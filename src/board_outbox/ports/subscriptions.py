"""The subscriptions: the service's reads of them, and the operators' audited writes (P6)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from board_outbox.model.rows import AuditEntry
from board_outbox.model.subscription_records import SubscriptionRecord
from board_outbox.model.subscriptions import Subscription

__all__ = ["SubscriptionAdmin", "SubscriptionStore"]


class SubscriptionStore(Protocol):
    async def get(self, sub_id: str) -> Subscription:
        """Raises ``SubscriptionNotFound`` (definitive) or ``StoreUnavailable`` (transient)."""
        ...

    async def list_for_tenant(self, tenant_id: str) -> list[Subscription]: ...

    async def get_many(self, sub_ids: Collection[str]) -> dict[str, Subscription]:
        """One round trip for a claimed batch; an id missing from the result is deleted (or
        malformed, which ``get`` would report)."""
        ...

    async def tenants(self) -> set[str]:
        """Tenants with at least one enabled subscription."""
        ...

    async def put(self, sub: Subscription) -> None: ...

    async def delete(self, sub_id: str) -> None: ...


class SubscriptionAdmin(Protocol):
    """The operators' reads and writes of the subscriptions (P6): each write carries its audit
    entry in the same atomic write, and is conditional on the revision the operator read (two
    operators editing at once: the second is told, nothing is lost). The service reads through
    ``SubscriptionStore``; these writes reach it like any other change of the collection."""

    async def records(self, tenant_id: str | None = None,
                      limit: int = 1000) -> list[SubscriptionRecord]:
        """The subscription documents (of ``tenant_id``; all when None), by id, at most
        ``limit``: each parsed on its own, one that does not decode named with its problem."""
        ...

    async def record(self, sub_id: str) -> SubscriptionRecord | None:
        """The document of ``sub_id`` (None: there is none), parsed as in ``records``."""
        ...

    async def create(self, sub: Subscription, entry: AuditEntry) -> bool:
        """Insert ``sub`` (revision 1) with ``entry`` as its audit. False, nothing written: a
        document with its id exists."""
        ...

    async def update(self, sub: Subscription, entry: AuditEntry, rev: int,
                     ref: object = None) -> bool:
        """Set every field of ``sub`` and append ``entry`` to the audit (its newest
        ``AUDIT_KEEP`` kept), revision + 1, only if the stored revision is still ``rev``
        (``ref``: the record's ``ref``, the document's own ``_id``). False, nothing written:
        changed (or removed) since it was read."""
        ...

    async def remove(self, sub_id: str, rev: int, ref: object = None) -> bool:
        """Delete the document of ``sub_id`` if its revision is still ``rev`` (False: changed
        or gone since it was read)."""
        ...
