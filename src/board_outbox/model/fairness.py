"""Fair claims across tenants (F1): which due rows one claim takes, and in which order.

A claim takes its rows round-robin by tenant: the first row of every tenant, then the second of
every tenant that has one, and so on, so one tenant's backlog delays another tenant's next row
by at most about one claim. Priority (a subscription's) orders rows only *within* a tenant's share:
each tenant's candidate rows are ordered by priority, highest first, and among equal
priorities keep the order the pick returned them in (oldest due first); a claim takes a prefix
of that order per tenant. So no row overtakes an earlier due row of its tenant of the same or
higher priority -- the rows of one subscription (one priority) keep their order, hence a card's
rows within a subscription -- and a tenant whose rows are all of low priority still gets its
turn beside a tenant with high-priority rows (priority never crosses tenants: no starvation).

A row carries the priority it was materialized with (``EffectRow.priority``); a stored value
that is not a whole number from ``MIN_PRIORITY`` to ``MAX_PRIORITY`` orders as 0 here (the
row itself does not decode and is parked when claimed: it costs only itself).

Ownership (S1) comes first: the owned tenants' rows, round-robin, then the rows of tenants
another replica owns that were materialized before ``steal_before`` (measured from the row's
``created_at``, not from its due time: a retry's backoff does not make a row look fresh, and a
fresh row of a live owner is left to it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar

from board_outbox.model.bounds import MAX_PRIORITY, MIN_PRIORITY

T = TypeVar("T")


def round_robin(rows: Iterable[T], tenant_of: Callable[[T], object],
                priority_of: Callable[[T], int] | None = None) -> list[T]:
    """Interleave ``rows`` by tenant, keeping each tenant's rows in their given order (with
    ``priority_of``: by priority, highest first, then in their given order); tenants take turns
    in the order of their first row."""
    queues: dict[object, list[T]] = {}
    for row in rows:
        queues.setdefault(tenant_of(row), []).append(row)
    if priority_of is not None:
        for q in queues.values():
            q.sort(key=lambda r: -priority_of(r))  # stable: equal priorities keep their order
    out: list[T] = []
    total = sum(len(q) for q in queues.values())
    depth = 0
    while len(out) < total:
        for q in queues.values():
            if depth < len(q):
                out.append(q[depth])
        depth += 1
    return out


def prioritized(items: Iterable[T], tenant_of: Callable[[T], object],
                priority_of: Callable[[T], int]) -> list[T]:
    """``items`` with the tenants' turns where they were, each tenant's own items in them
    ordered by priority, highest first, equal priorities in their given order (a batch merged
    from several sources -- the hand-off, expired leases, the pick -- run highest first within
    each tenant, the interleaving across tenants untouched)."""
    items = list(items)
    queues: dict[object, list[T]] = {}
    for item in items:
        queues.setdefault(tenant_of(item), []).append(item)
    for q in queues.values():
        q.sort(key=lambda r: -priority_of(r))
        q.reverse()  # popped from the end
    return [queues[tenant_of(item)].pop() for item in items]


def priority_of(doc: Mapping[str, Any]) -> int:
    """A stored row document's priority; 0 when missing (a slim row at 0, a row stored before
    priorities) or not a whole number in range."""
    value = doc.get("priority", 0)
    if isinstance(value, int) and not isinstance(value, bool) and (
            MIN_PRIORITY <= value <= MAX_PRIORITY):
        return int(value)
    return 0


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def stealable(doc: Mapping[str, Any], steal_before: float | None) -> bool:
    """Another owner's row may be taken: it was materialized by ``steal_before``."""
    return steal_before is None or _number(doc.get("created_at")) <= steal_before


def pick(
    docs: Iterable[dict[str, Any]], limit: int, *,
    prefer: Collection[str] | None = None, steal_before: float | None = None,
) -> list[dict[str, Any]]:
    """At most ``limit`` of the due row documents ``docs`` (oldest due first), fairly: the owned
    tenants' rows round-robin, then the stealable rows of the others, round-robin; each
    tenant's rows highest priority first, equal priorities oldest due first."""
    rows = list(docs)
    tenant: Callable[[dict[str, Any]], object] = lambda d: d.get("tenant_id")  # noqa: E731
    if prefer is None:
        return round_robin(rows, tenant, priority_of)[:limit]
    mine = [d for d in rows if d.get("tenant_id") in prefer]
    others = [d for d in rows if d.get("tenant_id") not in prefer and stealable(d, steal_before)]
    return (round_robin(mine, tenant, priority_of)
            + round_robin(others, tenant, priority_of))[:limit]
