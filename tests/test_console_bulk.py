"""The console's bulk replay (issue 33 item 5) over HTTP beside a running service: "Replay all
matching…" on the dead-letters page -> the plan (counts; anyone may read it, it writes nothing)
-> apply (admin only, CSRF and origin checked, audited) -> the progress page, which shows the
rows replayed and remaining on each reload and lets an admin abort between two rows."""

from __future__ import annotations

import re

import anyio
import httpx
import pytest

from board_outbox.adapters.memory import MemoryBackend
from tests.test_console import TOKEN, _parked_row, console, csrf_of, login, origin

pytestmark = pytest.mark.anyio

T = "acme"


async def _more(backend: MemoryBackend, n: int) -> list[str]:
    return [await _parked_row(backend, seq) for seq in range(2, n + 2)]


def _plan_form(html: str) -> dict[str, str]:
    """The apply form's fields as the plan page rendered them."""
    form = html.split('action="/ui/dead-letters/plan/apply"', 1)[1].split("</form>", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r'name="([^"]+)" value="([^"]*)"', form)}


def _count(html: str, name: str) -> int:
    m = re.search(rf'id="{name}">(\d+)<', html)
    assert m, name
    return int(m.group(1))


async def _until(client: httpx.AsyncClient, where: str, state: str) -> str:
    with anyio.fail_after(20):
        while True:
            page = (await client.get(where)).text
            if f'id="state">{state}' in page:
                return page
            await anyio.sleep(0.05)


def _bulk_audited(backend: MemoryBackend, bulk_id: str) -> list[str]:
    return sorted(d["row_key"] for d in backend.outbox.all_docs()
                  if any(a.get("detail") == f"attempts reset (bulk replay {bulk_id})"
                         for a in d.get("audit", [])))


async def test_the_plan_is_read_only_and_a_forged_apply_is_refused() -> None:
    async with console() as (backend, client, _key):
        await _more(backend, 3)
        dls = await client.get("/ui/dead-letters", params={"tenant": T, "since": "7d", "limit": "2"})
        link = re.search(r'id="replay-matching" href="([^"]+)"', dls.text)
        assert link, "no 'Replay all matching' on the dead-letters page"
        plan = await client.get(link.group(1).replace("&amp;", "&"))
        assert plan.status_code == 200 and _count(plan.text, "matched") == 4  # not only the 2 shown
        assert 'id="by-tenant"' in plan.text
        assert f'<td class="mono">{T}</td><td class="num">4' in plan.text
        assert 'id="apply-plan"' not in plan.text and "read-only" in plan.text.lower()
        forged = await client.post("/ui/dead-letters/plan/apply", headers=origin(client), data={
            "csrf": csrf_of(dls.text), "tenant": T, "matched": "4", "newest": "1e12"})
        assert forged.status_code == 403
        assert {d["state"] for d in backend.outbox.all_docs()} == {"failed"}
        bad = await client.get("/ui/dead-letters/plan", params={"since": "soon-ish", "tenant": T})
        assert bad.status_code == 400 and "is not a time" in bad.text
        bad = await client.get("/ui/dead-letters/plan", params={"tenant": "a/b"})
        assert bad.status_code == 400 and "invalid tenant" in bad.text


async def test_an_admin_applies_the_plan_and_each_row_is_audited() -> None:
    async with console(admin_token=TOKEN) as (backend, client, _key):
        keys = await _more(backend, 4)
        backend.outbox.insert_raw({"tenant_id": "other", "row_key": "other/1/sub/s",
                                   "state": "failed", "updated_at": 1.0, "seq": 1})
        await login(client)
        plan = await client.get("/ui/dead-letters/plan", params={"tenant": T})
        assert _count(plan.text, "matched") == 5 and 'id="apply-plan"' in plan.text
        form = _plan_form(plan.text)
        assert form["matched"] == "5" and form["tenant"] == T
        # no CSRF token, another origin: refused, nothing written
        for data, headers in (({k: v for k, v in form.items() if k != "csrf"}, origin(client)),
                              (form, {"Origin": "http://evil.example"})):
            r = await client.post("/ui/dead-letters/plan/apply", data=data, headers=headers)
            assert r.status_code == 403
        assert {d["state"] for d in backend.outbox.all_docs()} == {"failed"}
        r = await client.post("/ui/dead-letters/plan/apply", data={**form, "rate": "500"},
                              headers=origin(client))
        assert r.status_code == 303
        where = r.headers["location"]
        bulk_id = where.rsplit("/", 1)[1]
        done = await _until(client, where, "done")
        assert _count(done, "replayed") == 5 and _count(done, "remaining") == 0
        assert "console:ana" in done and 'http-equiv="refresh"' not in done
        assert _bulk_audited(backend, bulk_id) == sorted([_key, *keys])
        other = backend.outbox.raw("other/1/sub/s")
        assert other is not None and other["state"] == "failed"  # another tenant: not the plan's
        row = await client.get(f"/ui/rows/{keys[0]}")
        assert f"bulk replay {bulk_id}" in row.text  # the row page shows its audit entry


async def test_progress_shows_on_reload_and_an_abort_leaves_the_rest_untouched() -> None:
    async with console(admin_token=TOKEN) as (backend, client, _key):
        await _more(backend, 9)
        await login(client)
        plan = await client.get("/ui/dead-letters/plan", params={"tenant": T})
        form = {**_plan_form(plan.text), "rate": "4"}  # 10 rows at 4 a second: 2.5 s
        r = await client.post("/ui/dead-letters/plan/apply", data=form, headers=origin(client))
        where = r.headers["location"]
        bulk_id = where.rsplit("/", 1)[1]
        with anyio.fail_after(10):
            while _count(page := (await client.get(where)).text, "replayed") < 2:
                await anyio.sleep(0.05)
        assert 'id="state">running' in page and 'http-equiv="refresh"' in page
        assert _count(page, "remaining") == 10 - _count(page, "replayed")
        assert 'id="abort"' in page
        # a second bulk replay while this one runs: refused
        busy = await client.post("/ui/dead-letters/plan/apply", data=form, headers=origin(client))
        assert busy.status_code == 409
        stopped = await client.post(f"{where}/abort", data={"csrf": csrf_of(page)},
                                    headers=origin(client))
        assert stopped.status_code == 303
        page = await _until(client, where, "aborted")
        replayed, remaining = _count(page, "replayed"), _count(page, "remaining")
        assert 2 <= replayed < 10 and replayed + remaining == 10
        assert len(_bulk_audited(backend, bulk_id)) == replayed
        untouched = [d for d in backend.outbox.all_docs() if d["state"] == "failed"]
        assert len(untouched) == remaining and all(not d.get("audit") for d in untouched)
        assert (await client.get("/ui/dead-letters/bulk/nope")).status_code == 404


async def test_a_posted_plan_that_does_not_parse_is_a_400_and_writes_nothing() -> None:
    async with console(admin_token=TOKEN) as (backend, client, _key):
        await login(client)
        plan = await client.get("/ui/dead-letters/plan", params={"tenant": T})
        form = _plan_form(plan.text)
        for bad in ({"matched": ""}, {"matched": "0"}, {"matched": "99999"},
                    {"newest": "nan"}, {"newest": "soon"}, {"rate": "0"}, {"rate": "1e9"},
                    {"since": "whenever"}, {"limit": "-3"}):
            r = await client.post("/ui/dead-letters/plan/apply", data={**form, **bad},
                                  headers=origin(client))
            assert r.status_code == 400, bad
        assert {d["state"] for d in backend.outbox.all_docs()} == {"failed"}
