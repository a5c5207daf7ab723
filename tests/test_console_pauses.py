"""The console's pauses (issue 33) over HTTP, beside a running service (memory backend): shown on
the overview, the tenant page and ``/ui/pauses``; toggled only by an admin, through a form that
carries the session's CSRF token from the console's own origin; audited in the pause document as
``console:<name>``; honoured by the running replica within its heartbeat."""

from __future__ import annotations

import html

import anyio
import pytest

from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.errors import StoreUnavailable
from board_outbox.model.pause import HELD_OFFSET
from tests.test_console import TOKEN, T, console, csrf_of, login, origin

pytestmark = pytest.mark.anyio


async def test_pauses_are_shown_read_only_and_a_post_is_refused_without_a_token() -> None:
    async with console() as (backend, client, _key):
        await backend.pauses.pause("bot", "reviewer", reason="bad deploy", by="ana", at=1.0e9)
        page = await client.get("/ui/pauses")
        assert page.status_code == 200 and 'data-pause="bot:reviewer"' in page.text
        assert "bad deploy" in page.text and 'id="pause-form"' not in page.text
        assert 'id="resume-bot-reviewer"' not in page.text
        home = await client.get("/ui/")
        assert 'data-pause="bot:reviewer"' in home.text and 'id="pause-count"' in home.text
        tenant = await client.get(f"/ui/tenants/{T}")
        assert "Not paused" in tenant.text and 'id="pause-tenant"' not in tenant.text
        token = csrf_of((await client.get("/ui/dead-letters")).text)  # the session's token
        r = await client.post("/ui/pauses/pause", headers=origin(client), data={
            "csrf": token, "scope": "tenant", "key": T})
        assert r.status_code == 403 and "read-only" in r.text
        r = await client.post("/ui/pauses/resume", headers=origin(client), data={
            "csrf": token, "scope": "bot", "key": "reviewer"})
        assert r.status_code == 403
        assert [p.key for p in await backend.pauses.all() if p.active] == ["reviewer"]


async def test_an_admin_pauses_and_resumes_a_tenant_audited_and_honoured() -> None:
    async with console(admin_token=TOKEN) as (backend, client, _key):
        token = csrf_of((await client.get("/ui/dead-letters")).text)  # the session's token
        form = {"csrf": token, "scope": "tenant", "key": T, "reason": "incident 7",
                "back": "tenant"}
        # not logged in: refused even with a good CSRF token
        r = await client.post("/ui/pauses/pause", data=form, headers=origin(client))
        assert r.status_code == 403 and "log in" in r.text
        assert await login(client) is not None
        tenant = await client.get(f"/ui/tenants/{T}")
        assert 'id="pause-tenant"' in tenant.text
        form["csrf"] = csrf_of(tenant.text)
        # logged in, but no CSRF token / another one / another origin: refused, nothing written
        for data, headers in (({**form, "csrf": ""}, origin(client)),
                              ({**form, "csrf": "x" * 43}, origin(client)),
                              (form, {"Origin": "http://evil.example"}),
                              (form, {"Sec-Fetch-Site": "cross-site"})):
            r = await client.post("/ui/pauses/pause", data=data, headers=headers)
            assert r.status_code == 403, (data, headers)
        assert await backend.pauses.all() == []

        r = await client.post("/ui/pauses/pause", data=form, headers=origin(client))
        assert r.status_code == 303 and r.headers["location"] == f"/ui/tenants/{T}"
        [p] = await backend.pauses.all()
        assert (p.scope, p.key, p.active, p.reason, p.by) == ("tenant", T, True, "incident 7",
                                                             "console:ana")
        backend.outbox.insert_raw({  # a row a replica held for it
            "tenant_id": T, "row_key": f"{T}/50/sub/s", "seq": 50, "kind": "launch",
            "sub_id": "s", "state": "pending", "not_before": HELD_OFFSET + 1.0,
            "waiting": f"paused: tenant {T}"})
        tenant = await client.get(f"/ui/tenants/{T}")
        assert "<b>Paused</b>" in tenant.text and "console:ana" in tenant.text
        assert "1 row held" in tenant.text
        assert 'id="resume-tenant"' in tenant.text
        home = await client.get("/ui/")
        assert f'data-pause="tenant:{T}"' in home.text and 'id="resume-tenant-acme"' in home.text

        resume = {"csrf": form["csrf"], "scope": "tenant", "key": T, "back": "overview"}
        r = await client.post("/ui/pauses/resume", data=resume, headers=origin(client))
        assert r.status_code == 303 and r.headers["location"] == "/ui/"
        [p] = await backend.pauses.all()
        assert not p.active
        assert [(a.action, a.by) for a in p.audit] == [("pause", "console:ana"),
                                                       ("resume", "console:ana")]
        again = await client.post("/ui/pauses/resume", data=resume, headers=origin(client))
        assert again.status_code == 400 and "is not paused" in again.text


async def test_the_running_replica_honours_a_console_pause_within_its_heartbeat() -> None:
    async with console(admin_token=TOKEN) as (backend, client, _key):
        await login(client)
        page = await client.get("/ui/pauses")
        r = await client.post("/ui/pauses/pause", headers=origin(client), data={
            "csrf": csrf_of(page.text), "scope": "subscription", "key": "s", "reason": ""})
        assert r.status_code == 303 and r.headers["location"] == "/ui/pauses"
        # the service's view, through /metrics: the pause gauge, within one heartbeat (the
        # default 10 s / 6) and a second of slack for a loaded machine
        with anyio.fail_after(10 / 6 + 1.0):
            while 'board_outbox_pauses{scope="subscription"} 1.0' not in (
                    await client.get("/metrics")).text:
                await anyio.sleep(0.1)
        backend.outbox.insert_raw({  # a row a replica held for it: counted per tenant
            "tenant_id": T, "row_key": f"{T}/50/sub/s", "seq": 50, "kind": "launch",
            "sub_id": "s", "state": "pending", "not_before": HELD_OFFSET + 1.0,
            "waiting": "paused: subscription s"})
        with anyio.fail_after(5):
            while f'board_outbox_rows_held_by_pause{{tenant_id="{T}"}} 1.0' not in (
                    await client.get("/metrics")).text:
                await anyio.sleep(0.05)


@pytest.mark.parametrize("form, message", [
    ({"scope": "galaxy", "key": "x"}, "scope 'galaxy' is not one of"),
    ({"scope": "tenant", "key": "a/b"}, "invalid tenant_id"),
    ({"scope": "tenant", "key": "ghost"}, "unknown tenant"),
    ({"scope": "subscription", "key": "nope"}, "unknown subscription"),
    ({"scope": "bot", "key": "b", "reason": "x" * 600}, "--reason is 600 characters long"),
])
async def test_bad_pause_input_is_a_400_with_the_reason_and_writes_nothing(
        form: dict[str, str], message: str) -> None:
    async with console(admin_token=TOKEN) as (backend, client, _key):
        await login(client)
        page = await client.get("/ui/pauses")
        r = await client.post("/ui/pauses/pause", headers=origin(client),
                              data={"csrf": csrf_of(page.text), **form})
        assert r.status_code == 400 and message in html.unescape(r.text), r.text
        assert await backend.pauses.all() == []
        if "unknown" in message:  # "even so" pauses it
            r = await client.post("/ui/pauses/pause", headers=origin(client),
                                  data={"csrf": csrf_of(page.text), **form, "force": "1"})
            assert r.status_code == 303
            assert [p.key for p in await backend.pauses.all()] == [form["key"]]


async def test_a_pause_store_that_fails_costs_the_panel_not_the_page() -> None:
    async with console() as (backend, client, _key):
        with anyio.fail_after(10):  # the replica is past its start-up read (which must succeed)
            while (await client.get("/healthz")).status_code != 200:
                await anyio.sleep(0.05)
        real = backend.pauses.all

        async def down() -> list[object]:
            raise StoreUnavailable("injected: board_outbox_pauses unreachable")

        backend.pauses.all = down  # type: ignore[method-assign,assignment]
        for path in ("/ui/", f"/ui/tenants/{T}", "/ui/pauses"):
            r = await client.get(path)
            assert r.status_code == 200 and "injected: board_outbox_pauses unreachable" in r.text
        backend.pauses.all = real  # type: ignore[method-assign]


async def test_a_bad_pause_document_is_listed_not_fatal() -> None:
    async with console() as (backend, client, _key):
        backend.pauses.put_raw("tenant:acme", {"scope": "tenant", "key": T, "active": "yes",
                                               "at": 1.0})
        page = await client.get("/ui/pauses")
        assert page.status_code == 200 and "Malformed pause document" in page.text
        assert "Nothing is paused." in page.text
        BAD_DOCUMENTS.resolved("board_outbox_pauses", "tenant:acme")

