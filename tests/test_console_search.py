"""The console's search box and "Cancel all matching…" (A8) over HTTP beside a running
service: each search form, a bad or hostile search a 400 (never a query), and the bulk cancel's
plan -> apply (admin only, CSRF and origin checked, a reason required) -> progress."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import EventSnapshot
from board_outbox.model.rows import new_launch_row
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.surface.console import build_console
from tests.test_console import TOKEN, console, csrf_of, login, origin
from tests.test_console_bulk import _count, _until

pytestmark = pytest.mark.anyio

T = "acme"


async def _waiting(backend: MemoryBackend, seqs: range, tenant: str = T) -> list[str]:
    """Pending launch rows due in an hour (the running service leaves them alone)."""
    now = time.time()
    rows = []
    for seq in seqs:
        ev = EventSnapshot(seq=seq, type="card.created", card_id=f"card-{seq % 2}", at=now)
        row = new_launch_row(tenant, ev, Subscription(sub_id="s", tenant_id=tenant, bot="b"), now)
        row.not_before = now + 3600
        rows.append(row)
    await backend.outbox.upsert_rows(rows)
    return [r.row_key for r in rows]


def _apply_form(html: str) -> dict[str, str]:
    form = html.split('action="/ui/rows/cancel/plan/apply"', 1)[1].split("</form>", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r'name="([^"]+)" value="([^"]*)"', form)}


async def test_each_search_form_finds_its_rows_and_hostile_input_is_a_400() -> None:
    async with console() as (backend, client, dead):
        keys = await _waiting(backend, range(2, 8))
        for params, want in (
                ({"card": "card-0", "tenant": T}, {k for k in keys if int(k.split("/")[1]) % 2 == 0}),
                ({"event": f"{T}:3"}, {keys[1]}),
                ({"seq_range": "4..6", "tenant": T}, set(keys[2:5])),
                ({"row_key": dead}, {dead}),
                ({"state": "failed"}, {dead}),
                ({"state": "pending", "tenant": T}, set(keys))):
            page = await client.get("/ui/rows/find", params=params)
            assert page.status_code == 200, (params, page.text)
            found = set(re.findall(r'<a class="mono" href="/ui/rows/[^"]+">([^<]+)</a>', page.text))
            assert found == want, params
        page = await client.get("/ui/rows/find", params={"state": "pending"})
        assert 'id="cancel-matching"' in page.text
        for params in ({"card": "c"}, {"state": '{"$ne": null}'}, {"tenant": "a/b", "state": "done"},
                       {"row_key": f"{dead}/../x"}, {"event": "acme:1; drop"},
                       {"seq_range": "9..1", "tenant": T}, {"card": "c", "state": "done"},
                       {"state": "done", "limit": "1e9"}, {"row_key": "$where"}):
            bad = await client.get("/ui/rows/find", params=params)
            assert bad.status_code == 400 and 'id="message"' in bad.text, params


async def test_cancel_all_matching_is_planned_then_applied_by_an_admin_with_a_reason() -> None:
    async with console(admin_token=TOKEN) as (backend, client, _dead):
        keys = await _waiting(backend, range(2, 6))
        other = await _waiting(backend, range(1, 3), tenant="other")
        anonymous = await client.get("/ui/rows/cancel/plan", params={"tenant": T})
        assert _count(anonymous.text, "matched") == 4 and 'id="apply-plan"' not in anonymous.text
        await login(client)
        plan = await client.get("/ui/rows/cancel/plan", params={"tenant": T})
        form = _apply_form(plan.text)
        assert form["matched"] == "4"
        for data, headers in (({**form, "reason": "bot retired", "csrf": ""}, origin(client)),
                              ({**form, "reason": "bot retired"}, {"Origin": "http://evil.example"})):
            assert (await client.post("/ui/rows/cancel/plan/apply", data=data,
                                      headers=headers)).status_code == 403
        no_reason = await client.post("/ui/rows/cancel/plan/apply", data=form,
                                      headers=origin(client))
        assert no_reason.status_code == 400 and "reason" in no_reason.text
        assert {d["state"] for d in backend.outbox.all_docs() if d["row_key"] in keys} == {"pending"}
        r = await client.post("/ui/rows/cancel/plan/apply", headers=origin(client),
                              data={**form, "reason": "bot retired", "rate": "500"})
        assert r.status_code == 303
        done = await _until(client, r.headers["location"], "done")
        assert _count(done, "replayed") == 4 and "Bulk cancel" in done
        for key in keys:
            doc = backend.outbox.raw(key)
            assert doc is not None and doc["state"] == "cancelled"
            assert doc["audit"][-1]["by"] == "console:ana"
            assert doc["audit"][-1]["detail"].startswith("bot retired (bulk cancel ")
        assert {backend.outbox.raw(k)["state"] for k in other} == {"pending"}  # type: ignore[index]
        found = await client.get("/ui/rows/find", params={"state": "cancelled"})
        assert found.text.count('<a class="mono" href="/ui/rows/') == 4


async def test_a_search_that_reads_an_unreadable_row_names_it() -> None:
    async with console() as (backend, client, _dead):
        backend.outbox.insert_raw({"tenant_id": T, "row_key": f"{T}/9/sub/s", "seq": 9,
                                   "state": "done", "attempts": "many", "updated_at": 1.0})
        page = await client.get("/ui/rows/find", params={"event": f"{T}:9"})
        assert page.status_code == 200 and 'id="unreadable"' in page.text


@asynccontextmanager
async def _idle_console() -> AsyncIterator[tuple[MemoryBackend, httpx.AsyncClient]]:
    """The console alone (no service: no worker reclaims the expired leases under the test)."""
    backend = MemoryBackend()
    await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    cfg = load_config(env={}, ui={"enabled": True, "admin_token": TOKEN})
    app = Starlette(routes=[Mount("/ui", app=build_console(backend.stores(), cfg))])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://console") as client:
        yield backend, client


async def _held(backend: MemoryBackend, leases: tuple[float, ...]) -> list[str]:
    now = time.time()
    rows = []
    for seq, lease in enumerate(leases, start=50):
        ev = EventSnapshot(seq=seq, type="card.created", card_id="card", at=now)
        row = new_launch_row(T, ev, Subscription(sub_id="s", tenant_id=T, bot="b"), now)
        row.state, row.claim_id, row.lease_until = "claimed", f"h{seq}", lease  # type: ignore[assignment]
        rows.append(row)
    await backend.outbox.upsert_rows(rows)
    return [r.row_key for r in rows]


async def test_cancel_with_expired_leases_plans_them_apart_and_cancels_no_live_one() -> None:
    async with _idle_console() as (backend, client):
        (pending,) = await _waiting(backend, range(1, 2))
        now = time.time()
        live, dead = await _held(backend, (now + 3600, now - 60))
        await login(client)
        plain = await client.get("/ui/rows/cancel/plan", params={"tenant": T})
        assert _count(plain.text, "matched") == 1 and 'name="expired"' not in plain.text
        plan = await client.get("/ui/rows/cancel/plan", params={"tenant": T, "include_expired": "1"})
        assert plan.status_code == 200, plan.text
        assert [_count(plan.text, n) for n in ("matched", "pending", "expired", "live")] == [2, 1, 1, 1]
        form = _apply_form(plan.text)
        assert form["include_expired"] == "1" and form["expired"] == "1"
        no_time = {k: v for k, v in form.items() if k != "planned_at"}
        bad = await client.post("/ui/rows/cancel/plan/apply", headers=origin(client),
                                data={**no_time, "reason": "bot retired"})
        assert bad.status_code == 400 and backend.outbox.raw(dead)["state"] == "claimed"  # type: ignore[index]
        r = await client.post("/ui/rows/cancel/plan/apply", headers=origin(client),
                              data={**form, "reason": "bot retired", "rate": "500"})
        assert r.status_code == 303
        done = await _until(client, r.headers["location"], "done")
        assert _count(done, "replayed") == 2
        assert [backend.outbox.raw(k)["state"] for k in (pending, dead, live)] == [  # type: ignore[index]
            "cancelled", "cancelled", "claimed"]


async def test_include_expired_off_a_cancel_or_not_the_checkbox_is_a_400() -> None:
    async with _idle_console() as (backend, client):
        (dead,) = await _held(backend, (time.time() - 60,))
        await login(client)
        for path, params in (("/ui/rows/rerun/plan", {"include_expired": "1"}),
                             ("/ui/dead-letters/plan", {"include_expired": "1"}),
                             ("/ui/rows/cancel/plan", {"include_expired": "yes"}),
                             ("/ui/rows/cancel/plan", {"include_expired": '{"$ne": 0}'}),
                             ("/ui/rows/rerun/plan", {"tenant": "a/b"})):  # its 400 page renders
            page = await client.get(path, params=params)
            assert page.status_code == 400 and 'id="message"' in page.text, (path, params)
        page = await client.get("/ui/rows/cancel/plan")
        r = await client.post("/ui/rows/rerun/plan/apply", headers=origin(client), data={
            "csrf": csrf_of(page.text), "include_expired": "1", "matched": "1",
            "newest": repr(time.time()), "expired": "1", "planned_at": repr(time.time())})
        assert r.status_code == 400 and "include_expired" in r.text
        assert backend.outbox.raw(dead)["state"] == "claimed"  # type: ignore[index]


async def _done(backend: MemoryBackend, seq: int = 70) -> str:
    now = time.time()
    ev = EventSnapshot(seq=seq, type="card.created", card_id="card", at=now)
    row = new_launch_row(T, ev, Subscription(sub_id="s", tenant_id=T, bot="b"), now)
    row.state, row.outcome = "done", "launched"  # type: ignore[assignment]
    await backend.outbox.upsert_rows([row])
    return row.row_key


def _rerun_form(html: str) -> dict[str, str]:
    form = html.split('action="/ui/rows/rerun/plan/apply"', 1)[1].split("</form>", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r'name="([^"]+)" value="([^"]*)"', form)}


async def test_a_rerun_planned_again_counts_the_rows_rerun_already_and_the_checkbox_takes_them(
        ) -> None:
    async with _idle_console() as (backend, client):
        done = await _done(backend)
        await login(client)
        plan = await client.get("/ui/rows/rerun/plan", params={"tenant": T})
        assert _count(plan.text, "matched") == 1 and 'id="already-rerun"' not in plan.text
        r = await client.post("/ui/rows/rerun/plan/apply", headers=origin(client),
                              data={**_rerun_form(plan.text), "rate": "500"})
        assert r.status_code == 303
        await _until(client, r.headers["location"], "done")
        again = await client.get("/ui/rows/rerun/plan", params={"tenant": T})
        assert _count(again.text, "matched") == 0 and _count(again.text, "already-rerun") == 1
        assert 'id="apply-plan"' not in again.text
        asked = await client.get("/ui/rows/rerun/plan", params={"tenant": T, "include_rerun": "1"})
        assert _count(asked.text, "matched") == 1 and 'id="already-rerun"' not in asked.text
        form = _rerun_form(asked.text)
        assert form["include_rerun"] == "1"
        r = await client.post("/ui/rows/rerun/plan/apply", headers=origin(client),
                              data={**form, "rate": "500"})
        assert r.status_code == 303
        await _until(client, r.headers["location"], "done")
        assert backend.outbox.raw(f"{done}/rerun/2") is not None


async def test_include_rerun_off_a_rerun_or_not_the_checkbox_is_a_400() -> None:
    async with _idle_console() as (backend, client):
        done = await _done(backend)
        await login(client)
        for path, params in (("/ui/rows/cancel/plan", {"include_rerun": "1"}),
                             ("/ui/dead-letters/plan", {"include_rerun": "1"}),
                             ("/ui/rows/cancel/plan", {"include_one_shot": "1"}),
                             ("/ui/rows/rerun/plan", {"include_one_shot": "on"}),
                             ("/ui/rows/rerun/plan", {"include_rerun": "yes"}),
                             ("/ui/rows/rerun/plan", {"include_rerun": '{"$ne": 0}'})):
            page = await client.get(path, params=params)
            assert page.status_code == 400 and 'id="message"' in page.text, (path, params)
            assert next(iter(params)) in page.text
        page = await client.get("/ui/rows/rerun/plan")
        for path, extra in (("/ui/rows/cancel/plan/apply", {"include_rerun": "1", "reason": "r"}),
                            ("/ui/rows/rerun/plan/apply", {"include_rerun": "true"})):
            r = await client.post(path, headers=origin(client), data={
                "csrf": csrf_of(page.text), "matched": "1", "newest": repr(time.time()), **extra})
            assert r.status_code == 400 and "include_rerun" in r.text, (path, r.text)
        assert backend.outbox.raw(f"{done}/rerun/1") is None
