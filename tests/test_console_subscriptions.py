"""The console's subscriptions (P6) over HTTP, beside a running service (memory backend): listed
(a stored document that does not decode named with its problem) and shown with their audit to
anyone; added, edited, disabled, enabled and removed only by an admin, through a form that
carries the session's CSRF token from the console's own origin, checked by the service's own
decoder, conditional on the revision the page showed, and audited as ``console:<name>``."""

from __future__ import annotations

import re

import pytest

from board_outbox.model.subscriptions import Subscription
from tests.test_console import TOKEN, T, console, csrf_of, login, origin

pytestmark = pytest.mark.anyio

NEW = {"sub_id": "ship", "tenant_id": T, "bot": "shipper", "kind": "launch",
       "event_types": "card.moved, card.created", "column": "Done", "labels_all": "",
       "consume_labels": "", "priority": "2", "coalesce_quiet": "", "coalesce_max_wait": "",
       "max_in_flight": "", "max_per_second": "", "enabled": "1"}


def rev_of(page: str) -> str:
    m = re.search(r'name="rev" value="(\d+)"', page)
    assert m, "no revision in the page"
    return m.group(1)


async def test_listed_and_shown_read_only_and_a_post_is_refused_without_a_token() -> None:
    async with console() as (backend, client, _key):
        backend.subs._subs["bad"] = bad = Subscription(sub_id="bad", tenant_id=T, bot="b",
                                                       priority=99)
        backend.subs._by_tenant[T]["bad"] = bad
        page = await client.get("/ui/subscriptions", params={"tenant": T})
        assert page.status_code == 200 and 'data-sub="s"' in page.text
        assert 'data-bad="bad"' in page.text and "priority 99 is outside -10..10" in page.text
        assert 'id="sub-add"' not in page.text and "read-only" in page.text
        one = await client.get("/ui/subscriptions/s")
        assert one.status_code == 200 and "launch b, on any event" in one.text
        assert 'id="sub-edit"' not in one.text and "No command wrote it" in one.text
        assert (await client.get("/ui/subscriptions/nope")).status_code == 404
        home = await client.get("/ui/")
        assert 'id="nav-subscriptions"' in home.text
        token = csrf_of((await client.get("/ui/dead-letters")).text)  # the session's token
        r = await client.post("/ui/subscriptions/add", headers=origin(client),
                              data={**NEW, "csrf": token})
        assert r.status_code == 403 and "read-only" in r.text
        assert "ship" not in backend.subs._subs


async def test_an_admin_adds_edits_toggles_and_removes_audited_and_fenced() -> None:
    async with console(admin_token=TOKEN) as (backend, client, _key):
        page = await client.get("/ui/subscriptions")
        form = dict(NEW)
        assert 'id="sub-add"' not in page.text  # no form before the login
        form["csrf"] = csrf_of((await client.get("/ui/dead-letters")).text)
        r = await client.post("/ui/subscriptions/add", data=form, headers=origin(client))
        assert r.status_code == 403 and "log in" in r.text  # a good CSRF token, no login
        assert await login(client) is not None
        page = await client.get("/ui/subscriptions")
        assert 'id="sub-add"' in page.text
        form["csrf"] = csrf_of(page.text)
        for data, headers in (({**form, "csrf": ""}, origin(client)),
                              (form, {"Origin": "http://evil.example"}),
                              (form, {"Sec-Fetch-Site": "cross-site"})):
            r = await client.post("/ui/subscriptions/add", data=data, headers=headers)
            assert r.status_code == 403, (data, headers)
        assert "ship" not in backend.subs._subs

        r = await client.post("/ui/subscriptions/add", data=form, headers=origin(client))
        assert r.status_code == 303 and r.headers["location"] == "/ui/subscriptions/ship"
        sub = backend.subs._subs["ship"]
        assert sub.rule.event_types == ("card.moved", "card.created") and sub.priority == 2
        assert sub.rule.column == "Done" and sub.enabled

        one = await client.get("/ui/subscriptions/ship")
        assert 'id="sub-edit"' in one.text and "console:ana" in one.text
        rev = rev_of(one.text)
        edit = {**NEW, "csrf": csrf_of(one.text), "rev": rev, "column": "", "priority": "-3",
                "coalesce_quiet": "5", "coalesce_max_wait": "60"}
        r = await client.post("/ui/subscriptions/ship/edit", data=edit, headers=origin(client))
        assert r.status_code == 303
        sub = backend.subs._subs["ship"]
        assert sub.rule.column is None and sub.priority == -3
        assert sub.coalesce is not None and sub.coalesce.quiet_seconds == 5
        # the same form again: its revision is stale now -- refused, nothing written
        r = await client.post("/ui/subscriptions/ship/edit", data={**edit, "priority": "9"},
                              headers=origin(client))
        assert r.status_code == 409 and "changed since this page was opened" in r.text
        assert backend.subs._subs["ship"].priority == -3

        one = await client.get("/ui/subscriptions/ship")
        r = await client.post("/ui/subscriptions/ship/disable", headers=origin(client),
                              data={"csrf": csrf_of(one.text), "rev": rev_of(one.text)})
        assert r.status_code == 303 and not backend.subs._subs["ship"].enabled
        one = await client.get("/ui/subscriptions/ship")
        assert 'id="sub-disabled"' in one.text and ">Enable<" in one.text
        r = await client.post("/ui/subscriptions/ship/enable", headers=origin(client),
                              data={"csrf": csrf_of(one.text), "rev": rev_of(one.text)})
        assert r.status_code == 303 and backend.subs._subs["ship"].enabled

        one = await client.get("/ui/subscriptions/ship")
        rm = {"csrf": csrf_of(one.text), "rev": rev_of(one.text)}
        r = await client.post("/ui/subscriptions/ship/remove", data=rm, headers=origin(client))
        assert r.status_code == 400 and "confirm" in r.text  # the box not ticked
        assert "ship" in backend.subs._subs
        audit = backend.subs._audit["ship"]
        assert [(a.action, a.by) for a in audit] == [
            ("add", "console:ana"), ("edit", "console:ana"), ("disable", "console:ana"),
            ("enable", "console:ana")]
        assert "priority 2 -> -3" in audit[1].detail
        r = await client.post("/ui/subscriptions/ship/remove", data={**rm, "confirm": "yes"},
                              headers=origin(client))
        assert r.status_code == 303 and r.headers["location"] == "/ui/subscriptions"
        assert "ship" not in backend.subs._subs


@pytest.mark.parametrize(("change", "message"), [
    ({"priority": "11"}, "priority: expected `int` &lt;= 10"),
    ({"priority": "high"}, "priority: expected a whole number"),
    ({"coalesce_quiet": "60", "coalesce_max_wait": "5"}, "is above max_wait_seconds"),
    ({"coalesce_quiet": "5"}, "give both the quiet time and the longest wait"),
    ({"kind": "notify"}, "no handler runs effect kind"),
    ({"sub_id": "a b"}, "invalid subscription id"),
    ({"tenant_id": ""}, "invalid tenant"),
    ({"bot": ""}, "invalid bot"),
    ({"sub_id": "s"}, "exists already"),
    ({"max_per_second": "0.00001"}, "below the slowest rate"),
])
async def test_bad_input_is_a_400_with_the_reason_and_writes_nothing(
        change: dict[str, str], message: str) -> None:
    async with console(admin_token=TOKEN) as (backend, client, _key):
        await login(client)
        before = dict(backend.subs._subs)
        page = await client.get("/ui/subscriptions")
        r = await client.post("/ui/subscriptions/add", headers=origin(client),
                              data={**NEW, **change, "csrf": csrf_of(page.text)})
        assert r.status_code == 400 and message in r.text, r.text[-2000:]
        assert 'id="message"' in r.text
        assert backend.subs._subs == before


async def test_the_running_replica_materializes_a_subscription_the_console_added() -> None:
    import anyio

    async with console(admin_token=TOKEN) as (backend, client, _key):
        first = await backend.events.emit(T, "card.created", "c")  # the tenant's cursor starts
        with anyio.fail_after(10):
            while (await backend.cursors.get(T) or 0) < first:
                await anyio.sleep(0.02)
        await login(client)
        page = await client.get("/ui/subscriptions")
        r = await client.post("/ui/subscriptions/add", headers=origin(client), data={
            **NEW, "event_types": "card.created", "column": "", "csrf": csrf_of(page.text)})
        assert r.status_code == 303
        seq = await backend.events.emit(T, "card.created", "c")
        with anyio.fail_after(10):
            while backend.outbox.raw(f"{T}/{seq}/sub/ship") is None:
                await anyio.sleep(0.02)
        assert backend.outbox.raw(f"{T}/{first}/sub/ship") is None  # before it: owed nothing
