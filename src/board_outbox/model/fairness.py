"""Fair claims across tenants (F1): which due rows one claim takes.

A claim takes its rows round-robin by tenant: the first due row of every tenant, then the second
of every tenant that has one, and so on, so one tenant's backlog delays another tenant's next row
by at most about one claim. Each tenant's rows keep the order the pick returned them in (oldest
due first), and a claim takes a prefix of them: no row overtakes an earlier due row of its
tenant, hence of its subscription and card.

Ownership (S1) comes first: the owned tenants' rows, round-robin, then the rows of tenants
another replica owns that were materialized before ``steal_before`` (measured from the row's
``created_at``, not from its due time: a retry's backoff does not make a row look fresh, and a
fresh row of a live owner is left to it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


def round_robin(rows: Iterable[T], tenant_of: Callable[[T], object]) -> list[T]:
    """Interleave ``rows`` by tenant, keeping each tenant's rows in their given order; tenants
    take turns in the order of their first row."""
    queues: dict[object, list[T]] = {}
    for row in rows:
        queues.setdefault(tenant_of(row), []).append(row)
    out: list[T] = []
    total = sum(len(q) for q in queues.values())
    depth = 0
    while len(out) < total:
        for q in queues.values():
            if depth < len(q):
                out.append(q[depth])
        depth += 1
    return out


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def stealable(doc: dict[str, Any], steal_before: float | None) -> bool:
    """Another owner's row may be taken: it was materialized by ``steal_before``."""
    return steal_before is None or _number(doc.get("created_at")) <= steal_before


def pick(
    docs: Iterable[dict[str, Any]], limit: int, *,
    prefer: Collection[str] | None = None, steal_before: float | None = None,
) -> list[dict[str, Any]]:
    """At most ``limit`` of the due row documents ``docs`` (oldest due first), fairly: the owned
    tenants' rows round-robin, then the stealable rows of the others, round-robin."""
    rows = list(docs)
    tenant: Callable[[dict[str, Any]], object] = lambda d: d.get("tenant_id")  # noqa: E731
    if prefer is None:
        return round_robin(rows, tenant)[:limit]
    mine = [d for d in rows if d.get("tenant_id") in prefer]
    others = [d for d in rows if d.get("tenant_id") not in prefer and stealable(d, steal_before)]
    return (round_robin(mine, tenant) + round_robin(others, tenant))[:limit]
