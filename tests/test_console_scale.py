"""The console's page cost does not grow with the tenant count (issue 30): the overview reads
one page of the tenants that need a look, sorted and cut in the store, and a tenant page reads
that tenant only. Counted in store calls (and the tenants each call names) around a console
over 10 and over 300 tenants: the same calls, whatever the count. The wire figures at 20,000
tenants are a benchmark (``benchmarks/console_pages.py``), not a timed test."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import httpx
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import EventSnapshot
from board_outbox.model.rows import new_launch_row
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import Stores
from board_outbox.service.config import load_config
from board_outbox.surface.console import build_console

pytestmark = pytest.mark.anyio


class Counting:
    """A port whose async calls are counted by ``port.method`` (and the tenants named)."""

    def __init__(self, target: object, name: str, calls: Counter[str]) -> None:
        self._target, self._name, self._calls = target, name, calls

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if not callable(value) or attr.startswith("_"):
            return value
        calls, name = self._calls, self._name

        async def call(*args: Any, **kwargs: Any) -> Any:
            calls[f"{name}.{attr}"] += 1
            for a in list(args) + list(kwargs.values()):
                if isinstance(a, (list, tuple, set, frozenset, Mapping)) and a and all(
                        isinstance(x, str) for x in a):
                    calls[f"{name}.{attr}:names"] += len(a)
            return await value(*args, **kwargs)

        return call


async def _board(tenants: int) -> tuple[MemoryBackend, Stores, Counter[str]]:
    """``tenants`` tenants, each with a subscription and 3 events; every third one 2 behind
    (``t00000`` 3: the most behind); one in 30 of the others caught up with a dead-letter."""
    b = MemoryBackend()
    now = time.time()
    for i in range(tenants):
        t = f"t{i:05d}"
        await b.subs.put(Subscription(sub_id=f"s{i}", tenant_id=t, bot="b"))
        for seq in (1, 2, 3):
            await b.events.allocate_seq(t)
            b.events.insert_now({"tenant_id": t, "seq": seq, "type": "card.created",
                                 "card_id": "c", "at": now - 60 + seq})
        await b.cursors.put(t, 1 if i % 3 == 0 else 3)
        if i == 0:
            await b.events.allocate_seq(t)  # one more allocated: the most behind
        if i % 30 == 4:
            row = new_launch_row(t, EventSnapshot(seq=3, type="card.created", card_id="c", at=now),
                                 Subscription(sub_id=f"s{i}", tenant_id=t, bot="b"), now=now)
            row.state = "failed"
            await b.outbox.upsert_rows([row])
    calls: Counter[str] = Counter()
    real = b.stores()
    wrapped = {f.name: getattr(real, f.name) for f in fields(real)}
    for name, port in list(wrapped.items()):
        if port is not None and name != "launcher":
            wrapped[name] = Counting(port, name, calls)
    return b, Stores(**wrapped), calls


async def _pages(tenants: int) -> tuple[Counter[str], Counter[str], str, str]:
    _b, stores, calls = await _board(tenants)
    app = build_console(stores, load_config(env={}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as client:
        await client.get("/tenants/t00001")  # warm: the session, the first stall look
        calls.clear()
        home = await client.get("/")
        assert home.status_code == 200
        overview = Counter(calls)
        calls.clear()
        page = await client.get("/tenants/t00004")
        assert page.status_code == 200
        return overview, Counter(calls), home.text, page.text


async def test_the_overview_and_a_tenant_page_cost_the_same_at_10_and_300_tenants() -> None:
    small_ov, small_tp, _h, _p = await _pages(12)
    big_ov, big_tp, home, page = await _pages(300)
    assert small_tp == big_tp, (small_tp, big_tp)  # the tenant page: its tenant only
    # the overview: the same calls; the tenants they name are one page's at most
    assert {k for k in big_ov if not k.endswith(":names")} == \
        {k for k in small_ov if not k.endswith(":names")}
    assert all(big_ov[k] == small_ov[k] for k in big_ov if not k.endswith(":names")), \
        (small_ov, big_ov)
    from board_outbox.surface.console.data import PAGE_SIZE

    assert all(n <= PAGE_SIZE for k, n in big_ov.items() if k.endswith(":names")), big_ov
    # nothing on either page walks every tenant
    for every in ("events.heads", "events.tenants", "cursors.all", "subs.tenants",
                  "outbox.live_tenants", "rm_versions.all"):
        assert every not in big_ov and every not in big_tp, every
    # and the page is right: most behind first, the totals over every tenant
    rows = [line.split('"')[1] for line in home.split("data-tenant=")[1:]]
    assert rows[0] == "t00000" and len(rows) == 100
    assert 'id="tenant-count">300<' in home and 'id="behind-count">100<' in home
    assert 'id="dead-letter-count">10<' in home
    assert 'id="next-page"' in home
    assert 'id="cursor">3<' in page


async def test_later_pages_and_the_find_form() -> None:
    _b, stores, _calls = await _board(300)
    app = build_console(stores, load_config(env={}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as client:
        second = (await client.get("/", params={"page": "2"})).text
        rows = [line.split('"')[1] for line in second.split("data-tenant=")[1:]]
        # 100 behind (every third), then 10 with a dead-letter and caught up: 110 listed
        assert len(rows) == 10 and all(int(r[1:]) % 30 == 4 for r in rows)
        assert 'id="prev-page"' in second and 'id="next-page"' not in second
        beyond = await client.get("/", params={"page": "99"})
        assert beyond.status_code == 200 and "No more tenants" in beyond.text
        for junk in ("0", "-1", "x", "9" * 30):
            assert (await client.get("/", params={"page": junk})).status_code == 200
        found = await client.get("/tenants", params={"id": "t00007"})
        assert found.status_code == 303 and found.headers["location"] == "/tenants/t00007"
        odd = await client.get("/tenants", params={"id": "a/b?c"})
        assert odd.headers["location"] == "/tenants/a%2Fb%3Fc"
        assert (await client.get("/tenants/nobody")).status_code == 404


async def test_the_metrics_refresh_reads_a_bounded_number_of_first_events() -> None:
    """With more tenants lagging than the budget, each refresh reads at most the budget's first
    events (one indexed read each), stalled tenants are not read again, and within a few
    refreshes every lagging tenant has its lag in seconds."""
    from board_outbox.service.runtime import Service

    b, _stores, _calls = await _board(150)  # 50 lagging
    service = Service(b.stores(), load_config(env={}))
    service.next_events.budget = 20
    assert service.stores.status is not None
    real = service.stores.status.next_event_at
    sizes: list[int] = []

    async def spy(after: Mapping[str, int]) -> dict[str, float]:
        sizes.append(len(after))
        return await real(after)

    service.stores.status.next_event_at = spy  # type: ignore[method-assign]
    for _ in range(3):
        await service.refresh_status()
    assert sizes and max(sizes) <= 20, sizes
    lagging = [s for s in service.status.values() if s.lag_events]
    assert len(lagging) == 50 and all(s.lag_seconds > 0 for s in lagging)
    before = len(sizes)
    await service.refresh_status()  # no cursor moved: nothing to read
    assert sizes[before:] in ([], [0])


async def test_beside_a_replica_its_stalled_tenants_are_named_whatever_the_page() -> None:
    """The replica looks at every tenant each refresh: the overview counts and names its
    stalled tenants (longest first) even when they are not on the page shown."""
    from board_outbox.service.health import TenantStatus
    from board_outbox.service.runtime import Service
    from board_outbox.surface.console.data import MAX_STALLED_NAMED, ConsoleData

    b, _stores, _calls = await _board(30)
    cfg = load_config(env={})
    service = Service(b.stores(), cfg)
    service.status_enabled = True
    service.status = {f"s{i:02d}": TenantStatus(
        tenant_id=f"s{i:02d}", cursor=1, allocated_seq=2, lag_events=1, lag_seconds=9.0,
        oldest_pending_age_seconds=None, rows={}, dead_letters=0, stalled=True,
        stalled_for_seconds=100.0 + i) for i in range(MAX_STALLED_NAMED + 3)}
    service.status["t00000"] = TenantStatus(
        tenant_id="t00000", cursor=1, allocated_seq=4, lag_events=3, lag_seconds=9.0,
        oldest_pending_age_seconds=None, rows={}, dead_letters=0, stalled=True,
        stalled_for_seconds=50.0)
    ov = await ConsoleData(service.stores, cfg, service).overview()
    assert ov.stalled == MAX_STALLED_NAMED + 4
    assert ov.stalled_ids[0] == f"s{MAX_STALLED_NAMED + 2:02d}"
    assert len(ov.stalled_ids) == MAX_STALLED_NAMED
    first = next(s for s in ov.tenants if s.tenant_id == "t00000")
    assert first.stalled and first.stalled_for_seconds == 50.0  # the replica's detection
    app = build_console(service.stores, cfg, service)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as client:
        home = (await client.get("/")).text
    assert 'id="stalled-tenants"' in home and "…and 4 more" in home
    assert f'id="stalled-count">{MAX_STALLED_NAMED + 4}<' in home


async def test_beside_a_replica_the_overview_reads_no_tenant_from_the_store() -> None:
    """The replica refreshes every tenant's status for /metrics and /readyz (a constant number
    of queries a refresh); its console's overview pages that, reading nothing per tenant."""
    from board_outbox.service.runtime import Service
    from board_outbox.surface.console.data import ConsoleData

    _b, stores, calls = await _board(300)
    cfg = load_config(env={})
    service = Service(stores, cfg)
    service.status_enabled = True
    await service.refresh_status()
    calls.clear()
    ov = await ConsoleData(stores, cfg, service).overview()
    assert set(calls) <= {"members.live"}, calls
    assert [s.tenant_id for s in ov.tenants][:1] == ["t00000"] and len(ov.tenants) == 100
    assert (ov.total, ov.behind, ov.listed, ov.dead_letters) == (300, 100, 110, 10)
    second = await ConsoleData(stores, cfg, service).overview(2)
    assert len(second.tenants) == 10 and all(s.dead_letters for s in second.tenants)
