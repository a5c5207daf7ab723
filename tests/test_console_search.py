"""The console's search box and "Cancel all matching…" (A8) over HTTP beside a running
service: each search form, a bad or hostile search a 400 (never a query), and the bulk cancel's
plan -> apply (admin only, CSRF and origin checked, a reason required) -> progress."""

from __future__ import annotations

import re
import time

import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import EventSnapshot
from board_outbox.model.rows import new_launch_row
from board_outbox.model.subscriptions import Subscription
from tests.test_console import TOKEN, console, login, origin
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
