"""Fair claims across tenants (F1): which due rows one claim takes, and in which order.

A claim takes its rows round-robin by tenant: the first row of every tenant, then the second of
every tenant that has one, and so on, so one tenant's backlog delays another tenant's next row
by at most about one claim. Priority orders rows only *within* a tenant's share, and
only among the places its subscription rows hold there: a tenant's candidate rows, oldest due
first, are places; the places its subscription rows (launches, user effect kinds) hold take
those rows by priority, highest first, equal priorities oldest first; a projection row (no
subscription, no priority) keeps its place. A claim takes a prefix of that order per tenant.
So no row overtakes an earlier due row of its tenant of the same or higher priority -- the rows
of one subscription (one priority) keep their order, hence a card's rows within a subscription
-- and priorities never cross tenants: which tenant each place of a claim goes to, and whether
it is a projection row's or a subscription row's, is the same whatever the priorities (a
tenant whose rows are all of low priority keeps its turn for its launches beside a tenant with
high-priority ones; before, a launch at -10 sank beneath its tenant's projection rows while a
launch at +10 rose above them, so the first tenant's launches went twice as often).

A row carries the priority it was materialized with (``EffectRow.priority``); a stored value
that is not a whole number from ``MIN_PRIORITY`` to ``MAX_PRIORITY`` orders as 0 here (the
row itself does not decode and is parked when claimed: it costs only itself).

Ownership (S1) comes first: the owned tenants' rows, round-robin, then the rows of tenants
another replica owns that were materialized before ``steal_before`` (measured from the row's
``created_at``, not from its due time: a retry's backoff does not make a row look fresh, and a
fresh row of a live owner is left to it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from board_outbox.model.bounds import MAX_PRIORITY, MIN_PRIORITY
from board_outbox.model.ids import PROJECTION

T = TypeVar("T")


def ranked(places: Sequence[T], rank_of: Callable[[T], int | None],
           extra: Iterable[T] = ()) -> tuple[list[T], list[T]]:
    """One tenant's rows ``places`` (in their given order, oldest due first) with the places its
    ranked rows hold (``rank_of`` not None: subscription rows) taken by rank, highest first,
    equal ranks in their given order; a row ranked None (a projection row) keeps its place.
    ``extra``: ranked rows newer than ``places`` (a pick that read only a window of the
    tenant's rows: its rows of a priority above 0 beyond it) that compete for those places but
    hold none, so they never change how many places the tenant has, nor which are a
    projection's. Returns the places filled, and the ranked rows left over (rank order)."""
    slots = [i for i, r in enumerate(places) if rank_of(r) is not None]
    pool = [places[i] for i in slots] + [r for r in extra if rank_of(r) is not None]
    if not pool:
        return list(places), []
    pool.sort(key=lambda r: -(rank_of(r) or 0))  # stable: equal ranks keep their order
    out = list(places)
    for i, r in zip(slots, pool, strict=False):
        out[i] = r
    return out, pool[len(slots):]


def _turns(queues: Iterable[list[T]]) -> list[T]:
    queues = [q for q in queues if q]
    out: list[T] = []
    for depth in range(max(map(len, queues), default=0)):
        out += [q[depth] for q in queues if depth < len(q)]
    return out


def round_robin(rows: Iterable[T], tenant_of: Callable[[T], object],
                rank_of: Callable[[T], int | None] | None = None,
                extra: Iterable[T] = ()) -> list[T]:
    """Interleave ``rows`` by tenant, keeping each tenant's rows in their given order (with
    ``rank_of``: ``ranked``, ``extra`` competing for its tenant's places); tenants take turns in
    the order of their first row. The rows ``ranked`` leaves over come after every tenant's
    places, in turns too (an ``extra`` row of a tenant with no row in ``rows`` is one)."""
    queues: dict[object, list[T]] = {}
    for row in rows:
        queues.setdefault(tenant_of(row), []).append(row)
    if rank_of is None:
        return _turns(queues.values())
    more: dict[object, list[T]] = {}
    for row in extra:
        more.setdefault(tenant_of(row), []).append(row)
    left: dict[object, list[T]] = {}
    for tenant, q in queues.items():
        q[:], left[tenant] = ranked(q, rank_of, more.pop(tenant, ()))
    left.update(more)
    return _turns(queues.values()) + _turns(left.values())


def prioritized(items: Iterable[T], tenant_of: Callable[[T], object],
                rank_of: Callable[[T], int | None]) -> list[T]:
    """``items`` with the tenants' turns where they were, each tenant's own items in them
    ``ranked`` (a batch merged from several sources -- the hand-off, expired leases, the pick --
    run highest priority first within each tenant, the interleaving across tenants and the
    projection rows' places untouched)."""
    items = list(items)
    queues: dict[object, list[T]] = {}
    for item in items:
        queues.setdefault(tenant_of(item), []).append(item)
    for q in queues.values():
        q[:] = ranked(q, rank_of)[0]
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


def rank_of(doc: Mapping[str, Any]) -> int | None:
    """A stored row document's rank within its tenant's share: its priority; None for a
    projection row, which keeps its place."""
    return None if doc.get("kind") == PROJECTION else priority_of(doc)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def stealable(doc: Mapping[str, Any], steal_before: float | None) -> bool:
    """Another owner's row may be taken: it was materialized by ``steal_before``."""
    return steal_before is None or _number(doc.get("created_at")) <= steal_before


def pick(
    docs: Iterable[dict[str, Any]], limit: int, *,
    prefer: Collection[str] | None = None, steal_before: float | None = None,
    extra: Iterable[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """At most ``limit`` of the due row documents ``docs`` (oldest due first), fairly: the owned
    tenants' rows round-robin, then the stealable rows of the others, round-robin; each
    tenant's rows ``ranked`` (its subscription rows' places highest priority first, equal
    priorities oldest due first). ``extra``: subscription rows seen beyond a tenant's rows in
    ``docs`` that compete for its places (``ranked``); the owned rows left over still go
    before a stolen row (S1)."""
    rows = list(docs)
    more = list(extra)
    tenant: Callable[[dict[str, Any]], object] = lambda d: d.get("tenant_id")  # noqa: E731
    if prefer is None:
        return round_robin(rows, tenant, rank_of, more)[:limit]

    def others(d: dict[str, Any]) -> bool:
        return d.get("tenant_id") not in prefer and stealable(d, steal_before)

    mine = [d for d in rows if d.get("tenant_id") in prefer]
    theirs = [d for d in rows if others(d)]
    mine_more = [d for d in more if d.get("tenant_id") in prefer]
    return (round_robin(mine, tenant, rank_of, mine_more)
            + round_robin(theirs, tenant, rank_of, [d for d in more if others(d)]))[:limit]
