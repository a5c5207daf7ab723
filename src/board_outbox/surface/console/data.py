"""What the console's pages show, read through the ports with the same functions ``status``,
``dead-letters`` and ``/metrics`` use (``service.health``, ``surface.admin``, the membership
store). Nothing here writes, except ``replay`` (``surface.admin.replay_rows``, audited)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from board_outbox.engine.membership import owner
from board_outbox.model.domain import CLAIMED, FAILED, PENDING, EffectRow
from board_outbox.model.records import ReadModelVersions, RowFilter
from board_outbox.ports import Stores
from board_outbox.service.config import Config
from board_outbox.service.health import StallDetector, TenantStatus, all_tenants, tenant_status

if TYPE_CHECKING:
    from board_outbox.service.runtime import Service

# the overview lists at most this many tenants (most behind first); the rest are counted
MAX_TENANTS = 500
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
    tenants: list[TenantStatus]
    more_tenants: int
    owners: dict[str, str]  # tenant -> member id (only with more than one live replica)
    replicas: list[Replica] | None  # None: the backend keeps no membership
    stream: str  # the change stream's state, as far as this process can tell
    latency: list[Latency] | None = None  # None: no service in this process


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


def trace_id(row: EffectRow) -> str | None:
    """The W3C trace id of the row's trace context (``00-<trace id>-<span id>-<flags>``)."""
    if row.trace is None:
        return None
    parts = row.trace.traceparent.split("-")
    return parts[1] if len(parts) >= 4 and len(parts[1]) == 32 else None


class ConsoleData:
    """The console's reads. Beside a running service (``run`` with ``[ui] enabled``) it shows
    that service's view: per-tenant status with its stall detection, the change stream's state.
    Alone (``board-outbox console``) it reads the store itself and detects stalls across page
    loads with its own ``StallDetector``."""

    def __init__(self, stores: Stores, config: Config, service: Service | None = None) -> None:
        self.stores = stores
        self.config = config
        self.service = service
        self.stalls = StallDetector(config.tail.stall_seconds)

    async def statuses(self, now: float) -> list[TenantStatus]:
        if self.service is not None and self.service.status_enabled and self.service.status:
            return list(self.service.status.values())
        out = []
        for tenant in await all_tenants(self.stores):
            st = await tenant_status(self.stores, tenant, now)
            st.stalled_for_seconds = self.stalls.observe(tenant, st.cursor, st.lag_events > 0, now)
            st.stalled = st.stalled_for_seconds > 0
            out.append(st)
        self.stalls.forget(s.tenant_id for s in out)
        return out

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

    async def overview(self) -> Overview:
        now = time.time()
        statuses = await self.statuses(now)
        statuses.sort(key=lambda s: (not s.stalled, -s.lag_events, -s.dead_letters, s.tenant_id))
        shown = statuses[:MAX_TENANTS]
        replicas, owners = await self.replicas(now, [s.tenant_id for s in statuses])
        return Overview(generated_at=now, tenants=shown, more_tenants=len(statuses) - len(shown),
                        owners=owners, replicas=replicas, stream=await self.stream_state(),
                        latency=self.latency())

    async def tenant(self, tenant_id: str) -> TenantPage | None:
        if tenant_id not in await all_tenants(self.stores):
            return None
        now = time.time()
        status = next((s for s in await self.statuses(now) if s.tenant_id == tenant_id), None)
        if status is None:
            status = await tenant_status(self.stores, tenant_id, now)
        rows = await self.stores.outbox.find(RowFilter(
            tenant_id=tenant_id, states=(PENDING, CLAIMED, FAILED), limit=SAMPLE_ROWS))
        by_kind: dict[str, dict[str, int]] = {}
        for r in rows:
            counts = by_kind.setdefault(r.kind, {})
            counts[r.state] = counts.get(r.state, 0) + 1
        failures = [r for r in rows if r.errors][:50]
        replicas, owners = await self.replicas(now, [tenant_id])
        return TenantPage(status=status, by_kind=dict(sorted(by_kind.items())),
                          sampled=len(rows) >= SAMPLE_ROWS, failures=failures,
                          generations=await self.generations(tenant_id),
                          owner=owners.get(tenant_id) if replicas else None)

    async def generations(self, tenant_id: str) -> list[Generation]:
        pointers: dict[str, ReadModelVersions] = {}
        if self.stores.rm_versions is not None:
            pointers = {model: v for (model, tenant), v in (await self.stores.rm_versions.all()).items()
                        if tenant == tenant_id}
        names = sorted(set(self.config.projections) | set(pointers))
        return [Generation(n, pointers.get(n, ReadModelVersions()).active,
                           pointers.get(n, ReadModelVersions()).building,
                           pointers.get(n, ReadModelVersions()).progress) for n in names]

    async def dead_letters(self, flt: RowFilter, sub_id: str | None) -> list[EffectRow]:
        rows = await self.stores.outbox.find(flt)
        if sub_id:
            rows = [r for r in rows if r.sub_id == sub_id]
        return rows

    async def row(self, row_key: str) -> EffectRow | None:
        return await self.stores.outbox.get(row_key)
