"""What an operator asks of a running tail (O1-O3): per-tenant status (cursor, allocated seq,
lag in events and seconds, oldest live row, rows by state, dead-letters), stall detection, and
the readiness checks behind ``/readyz``.

``tenant_status`` reads only through the ports, so ``board-outbox status`` and the running
service's ``/metrics`` show the same numbers. ``StallDetector`` takes the time from the caller
(the injected clock), so it is tested without sleeping.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from board_outbox.model.bad_documents import BAD_DOCUMENTS, cap
from board_outbox.model.errors import StoreError
from board_outbox.model.records import RowSummary, TenantLag
from board_outbox.model.rows import FAILED, LIVE_STATES
from board_outbox.ports import StatusStore, Stores

COUNTERS, CURSORS = "board_event_counters", "trigger_cursors"

log = logging.getLogger("board_outbox.health")


class TenantStatus(msgspec.Struct, kw_only=True):
    """One tenant, as ``status --json`` prints it (field names are stable)."""

    tenant_id: str
    cursor: int
    allocated_seq: int
    lag_events: int  # allocated seq - cursor
    lag_seconds: float  # age of the oldest event past the cursor (0: none inserted yet)
    oldest_pending_age_seconds: float | None  # oldest pending or claimed row (None: none)
    rows: dict[str, int]  # by state
    dead_letters: int
    stalled: bool = False
    stalled_for_seconds: float = 0.0
    # R1/R2: what is wrong with this tenant's own documents (a cursor or counter that does not
    # parse, a cursor ahead of its counter); empty when nothing is
    problems: list[str] = msgspec.field(default_factory=list)
    # A5: event insert -> row done of the tenant's rows done within the latency window (null:
    # none done there); from the store, so every replica's work counts
    effect_latency_p50_seconds: float | None = None
    effect_latency_p99_seconds: float | None = None
    effect_latency_rows: int = 0
    # F2: pending rows waiting on a concurrency or rate limit (deferred, attempts unchanged)
    waiting_on_limit: int = 0
    # F3: pending rows held by a pause (of the tenant, a subscription or a bot)
    held_by_pause: int = 0


async def tenant_status(stores: Stores, tenant_id: str, now: float) -> TenantStatus:
    cursor = await stores.cursors.get(tenant_id) or 0
    allocated = await stores.events.allocated_seq(tenant_id)
    lag_seconds = 0.0
    if allocated > cursor:
        head = await stores.events.read_after(tenant_id, cursor, 1)
        if head:
            at = head[0].doc.get("at")
            if isinstance(at, int | float) and at > 0:
                lag_seconds = max(0.0, now - float(at))
    oldest = await stores.outbox.oldest_live_created_at(tenant_id)
    rows = await stores.outbox.count_by_state(tenant_id)
    return TenantStatus(
        tenant_id=tenant_id, cursor=cursor, allocated_seq=allocated,
        lag_events=max(0, allocated - cursor), lag_seconds=lag_seconds,
        oldest_pending_age_seconds=None if oldest is None else max(0.0, now - oldest),
        rows=dict(sorted(rows.items())), dead_letters=rows.get(FAILED, 0),
    )


# first-event reads per status refresh (``NextEvents``): the rest keep their last figure
MAX_NEXT_EVENT_READS = 1000


class NextEvents:
    """The ``at`` of each lagging tenant's first event past its cursor (its ``lag_seconds``),
    kept between refreshes. A tenant whose cursor has not moved since its last read costs no
    read (a stalled tenant is read once); the others are read at most ``budget`` per refresh,
    longest unread first, then most behind: with thousands of tenants lagging at once a refresh
    stays bounded (one indexed read each), and a tenant over the budget keeps the figure of its
    last read -- an older event, so its ``lag_seconds`` errs high, never low -- until its turn
    (``budget`` None: every one, each time; the one-shot ``status``)."""

    def __init__(self, budget: int | None = MAX_NEXT_EVENT_READS) -> None:
        self.budget = budget
        self._seen: dict[str, tuple[int, float, int]] = {}  # tenant -> (cursor, at, refresh)
        self._refresh = 0
        self.reads = 0  # tenants read by the last refresh

    async def at(self, status: StatusStore, lagging: Mapping[str, tuple[int, int]],
                 *, forget_others: bool = True) -> dict[str, float]:
        """``lagging``: tenant -> (cursor, events behind). Tenant -> ``at``, where known."""
        self._refresh += 1
        out: dict[str, float] = {}
        todo: list[tuple[int, int, str]] = []
        for t, (cursor, lag) in lagging.items():
            seen = self._seen.get(t)
            if seen is not None and seen[0] == cursor:
                out[t] = seen[1]
            else:
                todo.append((seen[2] if seen is not None else -1, -lag, t))
        todo.sort()
        cut = len(todo) if self.budget is None else self.budget
        reads = {t: lagging[t][0] for _, _, t in todo[:cut]}
        found = await status.next_event_at(reads) if reads else {}
        self.reads = len(reads)
        for t, cursor in reads.items():
            if t in found:
                self._seen[t] = (cursor, found[t], self._refresh)
            else:
                self._seen.pop(t, None)  # allocated, not inserted yet: nothing to date it by
        for _, _, t in todo[cut:]:
            stale = self._seen.get(t)
            if stale is not None:
                out[t] = stale[1]
        out.update(found)
        if forget_others:
            for t in [t for t in self._seen if t not in lagging]:
                del self._seen[t]
        return out


def _bad_counters(tenants: Iterable[str]) -> dict[str, list[str]]:
    """The counter and cursor problems the reads just met, for these tenants."""
    keep = set(tenants)
    bad: dict[str, list[str]] = {}
    for doc in BAD_DOCUMENTS.current():
        if doc.collection in (COUNTERS, CURSORS) and doc.key in keep:
            bad.setdefault(doc.key, []).append(f"{doc.collection}: {doc.problem}")
    return bad


def _status(t: str, head: int, cursor: int, summary: RowSummary | None, problems: list[str],
            held: tuple[int, int] | None, has_counter: bool, at: float | None,
            now: float) -> TenantStatus:
    rows = dict(sorted(summary.rows.items())) if summary is not None else {}
    oldest = summary.oldest_live_created_at if summary is not None else None
    if (has_counter and cursor > head) or held is not None:
        c, n = held if held is not None else (cursor, head)
        problems.append(f"cursor {c} is ahead of the counter ({n}): held until "
                        f"`board-outbox cursor reset --tenant {t} --to N`")
    return TenantStatus(
        tenant_id=t, cursor=cursor, allocated_seq=head, lag_events=max(0, head - cursor),
        lag_seconds=max(0.0, now - at) if at is not None and at > 0 else 0.0,
        oldest_pending_age_seconds=None if oldest is None else max(0.0, now - oldest),
        rows=rows, dead_letters=rows.get(FAILED, 0), problems=problems,
        waiting_on_limit=summary.waiting if summary is not None else 0,
        held_by_pause=summary.held if summary is not None else 0)


async def page_statuses(stores: Stores, page: Sequence[TenantLag], now: float,
                        next_events: NextEvents | None = None) -> list[TenantStatus]:
    """The status of the tenants of one ``StatusStore.attention`` page, in its order, in a
    constant number of queries over those tenants only (their rows, the held cursors, their
    first events): the console's overview costs the page, not the tenant count."""
    assert stores.status is not None
    tenants = [p.tenant_id for p in page]
    summary = await stores.status.row_summary(tenants)
    holds = await stores.cursors.holds(tenants)
    lagging = {p.tenant_id: (p.cursor, p.lag) for p in page if p.lag > 0}
    next_at = await (next_events or NextEvents(None)).at(stores.status, lagging,
                                                         forget_others=False)
    bad = _bad_counters(tenants)
    return [_status(p.tenant_id, p.head, p.cursor, summary.get(p.tenant_id),
                    list(bad.get(p.tenant_id, [])), holds.get(p.tenant_id), True,
                    next_at.get(p.tenant_id), now) for p in page]


async def tenant_statuses(stores: Stores, now: float,
                          next_events: NextEvents | None = None, *, live_only: bool = False,
                          ) -> dict[str, TenantStatus]:
    """Every tenant's status in a constant number of queries (counters, cursors, subscribed
    tenants, one row aggregate) plus the first event past each lagging cursor, read through
    ``next_events`` (bounded per refresh; None: every lagging tenant, once). A counter or
    cursor that does not parse costs its own tenant a ``problems`` entry, never the other
    tenants' figures. Without a ``StatusStore`` (a bare set of ports) it falls back to
    ``tenant_status`` per tenant, each one on its own."""
    if stores.status is None:
        out: dict[str, TenantStatus] = {}
        for t in await all_tenants(stores):
            try:
                out[t] = await tenant_status(stores, t, now)
            except StoreError as exc:
                out[t] = _broken(t, cap(str(exc), 300))
        return out
    heads = await stores.events.heads()
    cursors = await stores.cursors.all()
    holds = await stores.cursors.holds()
    # live_only: the live rows and the dead-letters, never the week of done history
    summary = await stores.status.row_summary(
        states=(*LIVE_STATES, FAILED) if live_only else None)
    live = {t for t, s in summary.items() if any(s.rows.get(state) for state in LIVE_STATES)}
    tenants = await stores.events.tenants() | await stores.subs.tenants() | live
    bad = _bad_counters(tenants)  # what the two reads above met, for these tenants
    lagging = {t: (cursors.get(t, 0), heads.get(t, 0) - cursors.get(t, 0)) for t in tenants
               if t not in bad and heads.get(t, 0) > cursors.get(t, 0)}
    next_at = await (next_events or NextEvents(None)).at(stores.status, lagging)
    return {t: _status(t, heads.get(t, 0), cursors.get(t, 0), summary.get(t),
                       list(bad.get(t, [])), holds.get(t), t in heads, next_at.get(t), now)
            for t in sorted(tenants)}


def _broken(tenant_id: str, problem: str) -> TenantStatus:
    return TenantStatus(tenant_id=tenant_id, cursor=0, allocated_seq=0, lag_events=0,
                        lag_seconds=0.0, oldest_pending_age_seconds=None, rows={},
                        dead_letters=0, problems=[problem])


LATENCY_WINDOW_SECONDS = 900.0
LATENCY_SAMPLE = 10_000  # the newest done rows of the window that are read, across tenants


class Latency(msgspec.Struct, frozen=True, kw_only=True):
    p50: float
    p99: float
    rows: int


async def effect_latency(stores: Stores, now: float, window: float = LATENCY_WINDOW_SECONDS,
                         sample: int = LATENCY_SAMPLE) -> dict[str, Latency]:
    """Per tenant, the p50 and p99 of event insert -> done over the rows done in the last
    ``window`` seconds (at most the ``sample`` newest): one query for every tenant (A5)."""
    by: dict[str, list[float]] = {}
    for lat in await stores.outbox.done_latencies(now - window, sample):
        by.setdefault(lat.tenant_id, []).append(lat.seconds)
    out: dict[str, Latency] = {}
    for tenant, values in by.items():
        if len(values) == 1:
            p50 = p99 = values[0]
        else:
            q = statistics.quantiles(values, n=100, method="inclusive")
            p50, p99 = q[49], q[98]
        out[tenant] = Latency(p50=round(p50, 3), p99=round(p99, 3), rows=len(values))
    return out


async def history_headroom(stores: Stores) -> float | None:
    """How far the saved resume token is from falling off the change stream's history (A2):
    the token's save time minus the time of the oldest change the server still keeps (the
    oplog window minus the token's age). Negative: the token is gone and the next resume of it
    fails (the waker then drops it and polls, C1). None: no token, or the server will not say.
    Two reads: the token's document and the first oplog entry."""
    if stores.feed is None or stores.tokens is None:
        return None
    saved = await stores.tokens.saved_at()
    if saved is None:
        return None
    start = await stores.feed.history_start()
    return None if start is None else round(saved - start, 3)


async def all_tenants(stores: Stores) -> list[str]:
    """Every tenant the store knows: allocated events, subscriptions, or live rows."""
    found = (await stores.events.tenants()) | (await stores.subs.tenants())
    return sorted(found | await stores.outbox.live_tenants())


class StallDetector:
    """A tenant is stalled when it is behind and its cursor has not moved for ``stall_seconds``
    (O2). Lagging but moving is healthy. Each stall is logged once, when it begins."""

    def __init__(self, stall_seconds: float) -> None:
        self.stall_seconds = stall_seconds
        self._since: dict[str, tuple[int, float]] = {}  # tenant -> (cursor, since when behind there)
        self._logged: set[str] = set()

    def observe(self, tenant_id: str, cursor: int, behind: bool, now: float) -> float:
        """Record one look at a tenant; how long it has been stalled (0.0: not stalled)."""
        if not behind:
            self._since.pop(tenant_id, None)
            self._recovered(tenant_id)
            return 0.0
        seen = self._since.get(tenant_id)
        if seen is None or seen[0] != cursor:
            self._since[tenant_id] = (cursor, now)
            self._recovered(tenant_id)
            return 0.0
        waited = now - seen[1]
        if waited < self.stall_seconds:
            return 0.0
        if tenant_id not in self._logged:
            self._logged.add(tenant_id)
            log.error("tenant %s stalled: behind, cursor at %d for %.0fs (tail.stall_seconds=%g)",
                      tenant_id, cursor, waited, self.stall_seconds,
                      extra={"tenant_id": tenant_id, "cursor": cursor})
        return waited

    def _recovered(self, tenant_id: str) -> None:
        if tenant_id in self._logged:
            self._logged.discard(tenant_id)
            log.warning("tenant %s no longer stalled", tenant_id, extra={"tenant_id": tenant_id})

    def forget(self, live: Iterable[str]) -> None:
        keep = set(live)
        for t in [t for t in self._since if t not in keep]:
            del self._since[t]
