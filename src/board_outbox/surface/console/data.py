"""What the console's pages show, read through the ports with the same functions ``status``,
``dead-letters`` and ``/metrics`` use (``service.health``, ``surface.admin``, the membership
store). Nothing here writes, except ``replay`` (``surface.admin.replay_rows``, audited)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from board_outbox.engine.flow.membership import owner
from board_outbox.engine.telemetry.spans import trace_id_of
from board_outbox.model.domain import CLAIMED, FAILED, PENDING, EffectRow, unreadable
from board_outbox.model.errors import MalformedDocument, StoreError
from board_outbox.model.records import AttentionPage, ReadModelVersions, RowFilter
from board_outbox.model.validation import cap
from board_outbox.ports import Stores
from board_outbox.service.config_sections import Config
from board_outbox.service.health import (
    NextEvents,
    StallDetector,
    TenantStatus,
    page_statuses,
    tenant_status,
    tenant_statuses,
)
from board_outbox.surface.console.attention import SharedAttention, View, sorted_view

if TYPE_CHECKING:
    from board_outbox.service.runtime import Service

# the overview lists the tenants that need a look (behind, or with dead-letters), most behind
# first, this many a page; caught-up tenants are counted, and opened by id
PAGE_SIZE = 100
MAX_STALLED_NAMED = 20  # stalled tenants named above the list (beside a replica)
# rows read to break live rows down by kind, and to find a tenant's recent failures
SAMPLE_ROWS = 1000


@dataclass
class Replica:
    member_id: str
    lease_left_seconds: float
    tenants: list[str] = field(default_factory=list)


@dataclass
class Latency:
    """Materialized -> done, per kind, from this replica's histogram since it started: each
    quantile is the upper bound of the bucket it falls in."""

    kind: str
    rows: int
    p50: float | None
    p99: float | None


@dataclass
class Overview:
    generated_at: float
    tenants: list[TenantStatus]  # this page's, most behind first
    page: int
    pages: int
    listed: int  # tenants behind or with dead-letters, every page
    total: int  # every tenant
    behind: int
    events_behind: int
    dead_letters: int
    stalled: int | None  # every tenant's, beside a replica; None: only this page is known
    stalled_ids: list[str]  # beside a replica: the longest stalled (at most MAX_STALLED_NAMED)
    owners: dict[str, str]  # tenant -> member id (only with more than one live replica)
    replicas: list[Replica] | None  # None: the backend keeps no membership
    stream: str  # the change stream's state, as far as this process can tell
    latency: list[Latency] | None = None  # None: no service in this process
    figures_at: float | None = None  # when the view of who needs a look was read (alone)


@dataclass
class Generation:
    projection: str
    active: int
    building: int | None
    progress: int


@dataclass
class TenantPage:
    status: TenantStatus
    by_kind: dict[str, dict[str, int]]  # kind -> state -> rows (live and failed rows, sampled)
    sampled: bool  # True when more live/failed rows exist than were read
    failures: list[EffectRow]  # rows with an error, newest first
    generations: list[Generation]
    owner: str | None
    unreadable: list[MalformedDocument] = field(default_factory=list)  # rows read, left out


def trace_id(row: EffectRow) -> str | None:
    """The W3C trace id of the row's trace context (``00-<trace id>-<span id>-<flags>``), by the
    check the metrics' exemplars use: 32 lowercase hex digits, not all zeros; a planted
    ``0x…``, upper case or a newline gives none (the page links it into the tracing UI)."""
    return trace_id_of(row.trace.traceparent) if row.trace is not None else None


class ConsoleData:
    """The console's reads. Beside a running service (``run`` with ``[ui] enabled``) it shows
    that service's view: per-tenant status with its stall detection, the change stream's state.
    Alone (``board-outbox console``) it reads the store itself and detects stalls across page
    loads with its own ``StallDetector``. Either way the tenants that need a look are one view
    shared by the page loads (``attention``); ``shared = False`` makes each load compute its
    own, as the console did before (the benchmark's baseline)."""

    def __init__(self, stores: Stores, config: Config, service: Service | None = None) -> None:
        self.stores = stores
        self.config = config
        self.service = service
        self.stalls = StallDetector(config.tail.stall_seconds)
        self.next_events = NextEvents()
        self.shared = True
        self.alone = (None if stores.status is None else SharedAttention(
            stores.status, config.service.metrics_interval_seconds, PAGE_SIZE))
        self._replica: tuple[dict[str, TenantStatus], View] | None = None

    def _stall(self, st: TenantStatus, now: float) -> None:
        """Beside a replica, its stall detection (it looks at every tenant each refresh); alone,
        this console's own, across page loads."""
        known = self.service.status.get(st.tenant_id) if self.service is not None else None
        if known is not None:
            st.stalled, st.stalled_for_seconds = known.stalled, known.stalled_for_seconds
            st.problems = list(dict.fromkeys(st.problems + known.problems))
        elif self.service is None:
            st.stalled_for_seconds = self.stalls.observe(st.tenant_id, st.cursor,
                                                         st.lag_events > 0, now)
            st.stalled = st.stalled_for_seconds > 0

    def replica_view(self) -> tuple[dict[str, TenantStatus], View] | None:
        """Beside a replica: its own status of every tenant (refreshed every
        ``metrics_interval_seconds`` for /metrics and /readyz, a constant number of queries
        each) and its view, sorted once per refresh; None when it keeps none (yet)."""
        svc = self.service
        if svc is None or not svc.status_enabled or not svc.status:
            return None
        every = svc.status
        if self._replica is None or self._replica[0] is not every or not self.shared:
            self._replica = (every, sorted_view(every, time.time(), time.monotonic()))
        return self._replica

    async def attention(self, page: int, now: float
                        ) -> tuple[AttentionPage, list[TenantStatus] | None, float | None]:
        """One page of the tenants that need a look, and when the shared view of them was read
        (None: read for this load). Alone:
        cut from the shared view (read in the store at most once per
        ``metrics_interval_seconds``); the page's statuses are then read over its tenants
        only (None here). A bare set of ports (no ``StatusStore``): every tenant's status,
        each load."""
        offset = (page - 1) * PAGE_SIZE
        if self.alone is None:
            every = await tenant_statuses(self.stores, now)
            cut = sorted_view(every, now, time.monotonic()).cut(offset, PAGE_SIZE)
            assert cut is not None  # a sorted view holds every listed tenant
            return cut, [every[t.tenant_id] for t in cut.tenants], None
        if self.shared:
            att, at = await self.alone.page(offset)
            return att, None, at
        return await self.alone.status.attention(offset, PAGE_SIZE), None, None

    async def replicas(self, now: float, tenants: Iterable[str]) -> tuple[list[Replica] | None,
                                                                           dict[str, str]]:
        if self.stores.members is None:
            return None, {}
        live = await self.stores.members.live(now)
        replicas = [Replica(m.member_id, round(m.expires_at - now, 1)) for m in live]
        owners: dict[str, str] = {}
        if replicas:
            ids = [r.member_id for r in replicas]
            by_id = {r.member_id: r for r in replicas}
            for t in tenants:
                owners[t] = who = owner(ids, t) if len(ids) > 1 else ids[0]
                by_id[who].tenants.append(t)
        return replicas, owners

    async def stream_state(self) -> str:
        svc = self.service
        if svc is not None:
            if not self.config.tail.change_streams or svc.stores.feed is None:
                return "off (change streams disabled): the poll net alone wakes the tail"
            return "open" if svc.stream_open else "closed: the poll net wakes the tail meanwhile"
        if self.stores.tokens is None:
            return "unknown (this backend keeps no resume token)"
        token = await self.stores.tokens.load()
        return ("a resume token is saved (each replica's /readyz says whether its stream is open)"
                if token is not None else "no resume token saved yet")

    def latency(self) -> list[Latency] | None:
        if self.service is None:
            return None
        buckets: dict[str, list[tuple[float, float]]] = {}
        for family in self.service.metrics.prom.latency.collect():
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    le = float(sample.labels["le"])
                    buckets.setdefault(sample.labels["kind"], []).append((le, sample.value))
        out = []
        for kind, cumulative in sorted(buckets.items()):
            cumulative.sort()
            total = cumulative[-1][1] if cumulative else 0.0

            def quantile(q: float, cumulative: list[tuple[float, float]] = cumulative,
                         total: float = total) -> float | None:
                return next((le for le, n in cumulative if n >= q * total), None) if total else None

            out.append(Latency(kind, int(total), quantile(0.5), quantile(0.99)))
        return out

    async def overview(self, page: int = 1) -> Overview:
        """The overview's cost is one page: cut from the view of the tenants that need a look
        (``attention``), then a constant number of queries over that page's tenants, run at
        once with the replicas and the stream's state."""
        now = time.time()
        stalled, stalled_ids = None, []
        replica = self.replica_view()
        if replica is not None:  # beside a replica: no store read but the membership
            every, view = replica
            att = view.cut((page - 1) * PAGE_SIZE, PAGE_SIZE)
            assert att is not None and view.stalled is not None
            statuses = [msgspec.structs.replace(every[t.tenant_id]) for t in att.tenants]
            ids = [t.tenant_id for t in att.tenants]
            (replicas, owners), stream = await concurrently(
                lambda: self.replicas(now, ids), self.stream_state)
            at: float | None = None  # the replica's last refresh
            stalled = len(view.stalled)
            stalled_ids = [s.tenant_id for s in view.stalled[:MAX_STALLED_NAMED]]
        else:
            att, known, at = await self.attention(page, now)
            ids = [t.tenant_id for t in att.tenants]

            async def page_of() -> list[TenantStatus]:
                return known if known is not None else await page_statuses(
                    self.stores, att.tenants, now, self.next_events)

            statuses, (replicas, owners), stream = await concurrently(
                page_of, lambda: self.replicas(now, ids), self.stream_state)
        for st in statuses:
            self._stall(st, now)
        if replica is not None:
            # the page's rows carry the replica's status as of now, the view its last cut: the
            # count takes the page's own rows from the rows themselves, so a tenant shown stalled
            # is counted (and one no longer stalled is not)
            shown = {st.tenant_id for st in statuses}
            stalled = len({s.tenant_id for s in replica[1].stalled or () if s.tenant_id not in shown}
                          | {st.tenant_id for st in statuses if st.stalled})
        return Overview(generated_at=now, tenants=statuses, page=page,
                        pages=max(1, -(-att.listed // PAGE_SIZE)), listed=att.listed,
                        total=att.total, behind=att.behind, events_behind=att.events_behind,
                        dead_letters=att.dead_letters, stalled=stalled,
                        stalled_ids=stalled_ids, owners=owners,
                        replicas=replicas, stream=stream, latency=self.latency(), figures_at=at)

    def refresh_due(self) -> bool:
        """Alone: the shared view is past its age (the page's response then refreshes it).
        Beside a replica whose status is there, never: the pages are cut from that."""
        return (self.alone is not None and self.shared and self.alone.due()
                and self.replica_view() is None)

    async def refresh_view(self) -> None:
        if self.alone is not None:
            await self.alone.refresh_after_response()

    async def tenant(self, tenant_id: str) -> TenantPage | None:
        """One tenant's page reads that tenant only (its counter, cursor, rows, pointers), its
        independent reads at once."""
        now = time.time()

        async def status() -> TenantStatus:
            try:
                return await tenant_status(self.stores, tenant_id, now)
            except StoreError as exc:  # its counter or cursor does not parse: the page says so
                return TenantStatus(tenant_id=tenant_id, cursor=0, allocated_seq=0,
                                    lag_events=0, lag_seconds=0.0,
                                    oldest_pending_age_seconds=None, rows={}, dead_letters=0,
                                    problems=[cap(str(exc), 300)])

        with unreadable() as bad:  # R1, R7: a row that does not decode is named, not fatal
            st, rows, (replicas, owners), generations = await concurrently(
                status, lambda: self.stores.outbox.find(RowFilter(
                    tenant_id=tenant_id, states=(PENDING, CLAIMED, FAILED), limit=SAMPLE_ROWS)),
                lambda: self.replicas(now, [tenant_id]), lambda: self.generations(tenant_id))
        if not (st.allocated_seq or st.rows or st.problems
                or await self.stores.cursors.get(tenant_id) is not None
                or await self.stores.subs.list_for_tenant(tenant_id)):
            return None
        self._stall(st, now)
        by_kind: dict[str, dict[str, int]] = {}
        for r in rows:
            counts = by_kind.setdefault(r.kind, {})
            counts[r.state] = counts.get(r.state, 0) + 1
        return TenantPage(status=st, by_kind=dict(sorted(by_kind.items())),
                          sampled=len(rows) >= SAMPLE_ROWS,
                          failures=[r for r in rows if r.errors][:50], generations=generations,
                          owner=owners.get(tenant_id) if replicas else None, unreadable=bad)

    async def generations(self, tenant_id: str) -> list[Generation]:
        """The configured projections' pointers for this tenant (one read each)."""
        out = []
        for name in sorted(set(self.config.projections)):
            v = (await self.stores.rm_versions.get(name, tenant_id)
                 if self.stores.rm_versions is not None else ReadModelVersions())
            out.append(Generation(name, v.active, v.building, v.progress))
        return out

    async def dead_letters(self, flt: RowFilter, sub_id: str | None) -> list[EffectRow]:
        rows = await self.stores.outbox.find(flt)
        if sub_id:
            rows = [r for r in rows if r.sub_id == sub_id]
        return rows

    async def row(self, row_key: str) -> EffectRow | None:
        return await self.stores.outbox.get(row_key)


async def concurrently(*calls: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Run independent reads at once; their results in order. The first failure cancels the
    others and is raised as it is (a store error stays a store error for the page's handler,
    not an exception group)."""
    results: list[Any] = [None] * len(calls)
    failed: list[Exception] = []

    async def one(i: int, call: Callable[[], Awaitable[Any]]) -> None:
        try:
            results[i] = await call()
        except Exception as exc:  # raised again below, unwrapped
            failed.append(exc)
            tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        for i, call in enumerate(calls):
            tg.start_soon(one, i, call)
    if failed:
        raise failed[0]
    return results
