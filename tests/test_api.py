"""The JSON API (A8): a contract test that drives every declared endpoint (the OpenAPI document
and the routes come from one declaration: an endpoint added there and not here fails), the
bearer tokens' scopes (none, unknown, revoked, read on an admin endpoint), the hostile inputs
(filter injection, another tenant's rows, racing applies), and the token CLI."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.engine.upkeep.api_tokens import create_token
from board_outbox.model.board import EventSnapshot
from board_outbox.model.clock import SystemClock
from board_outbox.model.rows import ErrorEntry, new_launch_row
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.surface.api import ENDPOINTS, build_api

T = "acme"


async def _rows(backend: MemoryBackend, tenant: str = T, n: int = 3, state: str = "pending") -> list[str]:
    now = time.time()
    rows = []
    for seq in range(1, n + 1):
        ev = EventSnapshot(seq=seq, type="card.created", card_id=f"c{seq}", at=now)
        row = new_launch_row(tenant, ev, Subscription(sub_id="s", tenant_id=tenant, bot="b"), now)
        row.state = state  # type: ignore[assignment]
        row.not_before = now + 3600
        if state == "failed":
            row.errors = [ErrorEntry(attempt=1, at=now, error="LaunchFailed: 503")]
        rows.append(row)
    await backend.outbox.upsert_rows(rows)
    return [r.row_key for r in rows]


@asynccontextmanager
async def api() -> AsyncIterator[tuple[MemoryBackend, httpx.AsyncClient, dict[str, str]]]:
    backend = MemoryBackend()
    await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    stores = backend.stores()
    tokens = {}
    for name, scope in (("reader", "read"), ("ops", "admin"), ("gone", "admin")):
        text, tok = await create_token(backend.api_tokens, name=name, scope=scope, by="t",
                                       clock=SystemClock())
        tokens[name] = text
        if name == "gone":
            assert await backend.api_tokens.revoke(tok.token_id, time.time(), "t")
    app = build_api(stores, load_config(env={}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api") as client:
        yield backend, client, tokens


def _auth(text: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {text}"}


@pytest.mark.anyio
async def test_every_endpoint_answers_its_scope_and_refuses_the_rest() -> None:
    async with api() as (backend, client, tok):
        pending = await _rows(backend)
        failed = await _rows(backend, tenant="other", state="failed")
        doc = (await client.get("/openapi.json")).json()
        declared = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
        assert declared == {(e.method, e.path) for e in ENDPOINTS}
        now = time.time()
        calls: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {
            ("GET", "/tenants"): ("/tenants", {}),
            ("GET", "/rows"): ("/rows", {"params": {"state": "pending", "tenant": T}}),
            ("GET", "/rows/{row_key}"): (f"/rows/{pending[0]}", {}),
            ("GET", "/rows/{row_key}/explain"): (f"/rows/{pending[0]}/explain", {}),
            ("GET", "/dead-letters"): ("/dead-letters", {"params": {"tenant": "other"}}),
            ("GET", "/pauses"): ("/pauses", {}),
            ("GET", "/series"): ("/series", {"params": {"minutes": "5"}}),
            ("POST", "/bulk/{action}/plan"): ("/bulk/cancel/plan",
                                               {"json": {"filter": {"tenant": T}}}),
            ("POST", "/bulk/{action}/apply"): ("/bulk/replay/apply", {"json": {
                "filter": {"tenant": "other"}, "matched": 3, "newest": now + 1, "rate": 1000}}),
            ("GET", "/bulk/{bulk_id}"): ("/bulk/none", {}),
            ("POST", "/pauses"): ("/pauses", {"json": {"scope": "tenant", "key": T,
                                                         "reason": "maintenance"}}),
            ("DELETE", "/pauses/{scope}/{key}"): (f"/pauses/tenant/{T}", {}),
        }
        assert set(calls) == {(e.method, e.path) for e in ENDPOINTS}  # every route driven
        for ep in ENDPOINTS:
            path, kw = calls[(ep.method, ep.path)]
            for headers in ({}, _auth("bo_0123456789abcdef_" + "x" * 43), _auth(tok["gone"]),
                            {"Authorization": f"Basic {tok['ops']}"}):
                r = await client.request(ep.method, path, headers=headers, **kw)
                assert r.status_code == 401, (ep, r.text)
                assert r.headers["www-authenticate"].startswith("Bearer")
            r = await client.request(ep.method, path, headers=_auth(tok["reader"]), **kw)
            if ep.scope == "admin":
                assert r.status_code == 403, (ep, r.text)
                r = await client.request(ep.method, path, headers=_auth(tok["ops"]), **kw)
            want = {"/bulk/{bulk_id}": 404, "/bulk/{action}/apply": 202,
                    "/pauses": 201 if ep.method == "POST" else 200}.get(ep.path, 200)
            assert r.status_code == want, (ep, r.text)
            r.json()
        assert {r["row_key"] for r in (await client.get(
            "/rows", params={"state": "pending", "tenant": T},
            headers=_auth(tok["reader"]))).json()["rows"]} == set(pending)
        assert {backend.outbox.raw(k)["state"] for k in failed} == {"pending"}  # type: ignore[index]
        plan = (await client.post("/bulk/cancel/plan", json={"filter": {"tenant": T}},
                                  headers=_auth(tok["reader"]))).json()
        assert plan["matched"] == 3 and plan["action"] == "cancel"
        r = await client.post("/bulk/cancel/apply", headers=_auth(tok["ops"]), json={
            "filter": {"tenant": T}, "matched": 3, "newest": plan["newest"], "reason": "retired"})
        assert r.status_code == 202
        progress = await client.get(r.headers["location"].removeprefix("/api/v1"),
                                    headers=_auth(tok["reader"]))
        assert progress.json()["applied"] == 3
        assert {backend.outbox.raw(k)["state"] for k in pending} == {"cancelled"}  # type: ignore[index]
        assert backend.outbox.raw(pending[0])["audit"][-1]["by"] == "api:ops"  # type: ignore[index]


@pytest.mark.anyio
@pytest.mark.parametrize("body", [
    {"filter": {"tenant": {"$ne": None}}},  # an operator object: not a value
    {"filter": {"tenant": "acme", "$where": "1"}},  # an unknown key
    {"filter": {"tenant": "a/b"}},  # not an id
    {"filter": ["tenant=acme"]},
    {"filter": {"limit": "1e9"}},
    {"filter": {"since": "soon"}},
])
@pytest.mark.anyio
async def test_filter_injection_is_a_400_and_reads_nothing(body: dict[str, Any]) -> None:
    async with api() as (backend, client, tok):
        await _rows(backend)
        r = await client.post("/bulk/cancel/plan", json=body, headers=_auth(tok["reader"]))
        assert r.status_code == 400 and set(r.json()) == {"error"}, r.text
        assert "\n" not in r.json()["error"]
        for params in ({"state": '{"$ne": 1}'}, {"card": "c1"}, {"row_key": "$where"},
                       {"event": "acme:1 OR 1=1"}, {"tenant": "acme", "seq_range": "a..b"}):
            r = await client.get("/rows", params=params, headers=_auth(tok["reader"]))
            assert r.status_code == 400, params
        r = await client.post("/bulk/cancel/plan", content=b"{not json",
                              headers=_auth(tok["reader"]))
        assert r.status_code == 400


@pytest.mark.anyio
async def test_a_cancel_with_a_plan_of_another_tenant_takes_only_its_own_filters_rows() -> None:
    """Cross-tenant: the apply takes what its filter says, never more than the plan's count,
    and two applies at once cancel each row once."""
    async with api() as (backend, client, tok):
        mine = await _rows(backend, n=4)
        theirs = await _rows(backend, tenant="other", n=4)
        plan = (await client.post("/bulk/cancel/plan", json={"filter": {"tenant": "other"}},
                                  headers=_auth(tok["reader"]))).json()
        body = {"filter": {"tenant": "other"}, "matched": plan["matched"],
                "newest": plan["newest"], "reason": "r", "rate": 1000}
        codes = []

        async def apply() -> None:
            codes.append((await client.post("/bulk/cancel/apply", json=body,
                                             headers=_auth(tok["ops"]))).status_code)

        async with anyio.create_task_group() as tg:
            tg.start_soon(apply)
            tg.start_soon(apply)
        assert sorted(codes) in ([202, 202], [202, 409])
        assert {backend.outbox.raw(k)["state"] for k in theirs} == {"cancelled"}  # type: ignore[index]
        assert all(len(backend.outbox.raw(k)["audit"]) == 1 for k in theirs)  # type: ignore[index]
        assert {backend.outbox.raw(k)["state"] for k in mine} == {"pending"}  # type: ignore[index]


def test_tokens_are_stored_hashed_and_the_cli_creates_lists_and_revokes(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from board_outbox.surface.cli import main
    from tests.test_admin_cli import factory_for

    monkeypatch.setenv("BOARD_OUTBOX_STORE__BACKEND", "memory")
    backend = MemoryBackend()
    factory = factory_for(backend)
    assert main(["api-tokens", "create", "--name", "ci", "--scope", "admin", "--json"],
                factory) == 0
    created = json.loads(capsys.readouterr().out)
    text, tid = created["token"], created["record"]["token_id"]
    assert text.startswith(f"bo_{tid}_")
    stored = json.dumps(backend.api_tokens._docs)
    assert text.split("_", 2)[2] not in stored  # only the hash
    assert main(["api-tokens", "list", "--json"], factory) == 0
    listed = json.loads(capsys.readouterr().out)["tokens"]
    assert [(t["token_id"], t["scope"], t["revoked_at"]) for t in listed] == [(tid, "admin", None)]
    assert "digest" not in listed[0]
    assert main(["api-tokens", "revoke", tid], factory) == 0
    assert main(["api-tokens", "revoke", tid], factory) == 1  # revoked already
    capsys.readouterr()
    with pytest.raises(SystemExit) as bad:
        main(["api-tokens", "create", "--name", "x", "--scope", "root"], factory)
    assert bad.value.code == 2
    assert main(["api-tokens", "create", "--name", " ", "--scope", "read"], factory) == 2


async def _claimed_rows(backend: MemoryBackend, leases: tuple[float, ...]) -> list[str]:
    """Claimed rows of tenant T (seqs from 101) under leases ending at ``leases``."""
    now = time.time()
    rows = []
    for seq, lease in enumerate(leases, start=101):
        ev = EventSnapshot(seq=seq, type="card.created", card_id=f"c{seq}", at=now)
        row = new_launch_row(T, ev, Subscription(sub_id="s", tenant_id=T, bot="b"), now)
        row.state, row.claim_id, row.lease_until = "claimed", f"h{seq}", lease  # type: ignore[assignment]
        rows.append(row)
    await backend.outbox.upsert_rows(rows)
    return [r.row_key for r in rows]


@pytest.mark.anyio
async def test_a_cancel_with_include_expired_takes_the_claimed_rows_whose_lease_ended() -> None:
    async with api() as (backend, client, tok):
        pending = await _rows(backend, n=2)
        now = time.time()
        live, *dead = await _claimed_rows(backend, (now + 3600, now - 60, now - 1))
        plan = (await client.post("/bulk/cancel/plan", headers=_auth(tok["reader"]), json={
            "filter": {"tenant": T}, "include_expired": True})).json()
        assert (plan["matched"], plan["expired"], plan["live"]) == (4, 2, 1)
        body = {"filter": {"tenant": T}, "matched": 4, "newest": plan["newest"],
                "reason": "retired", "rate": 1000, "include_expired": True,
                "expired": plan["expired"], "planned_at": plan["planned_at"]}
        r = await client.post("/bulk/cancel/apply", json=body, headers=_auth(tok["ops"]))
        assert r.status_code == 202, r.text
        progress = await client.get(r.headers["location"].removeprefix("/api/v1"),
                                    headers=_auth(tok["reader"]))
        assert progress.json()["applied"] == 4
        assert {backend.outbox.raw(k)["state"] for k in pending + dead} == {"cancelled"}  # type: ignore[index]
        assert backend.outbox.raw(live)["state"] == "claimed"  # type: ignore[index]


@pytest.mark.anyio
@pytest.mark.parametrize(("path", "body", "says"), [
    ("/bulk/rerun/plan", {"filter": {"tenant": T}, "include_expired": True}, "only a cancel"),
    ("/bulk/replay/plan", {"filter": {"tenant": T}, "include_expired": True}, "only a cancel"),
    ("/bulk/cancel/plan", {"filter": {"tenant": T}, "include_expired": "yes"}, "true or false"),
    ("/bulk/cancel/plan", {"filter": {"tenant": T}, "include_expired": 1}, "true or false"),
    ("/bulk/cancel/plan", {"filter": {"tenant": T}, "include_expired": None}, "true or false"),
    ("/bulk/cancel/plan", {"filter": {"tenant": T}, "include_expired": {"$ne": False}},
     "true or false"),
    ("/bulk/rerun/apply", {"filter": {"tenant": T}, "matched": 1, "newest": 1.0,
                           "include_expired": True, "expired": 1, "planned_at": 1.0},
     "only a cancel"),
    ("/bulk/cancel/apply", {"filter": {"tenant": T}, "matched": 2, "newest": 1.0, "reason": "r",
                            "expired": 1}, "only with include_expired"),
    ("/bulk/cancel/apply", {"filter": {"tenant": T}, "matched": 2, "newest": 1.0, "reason": "r",
                            "include_expired": True, "expired": 1}, "planned_at"),
    ("/bulk/cancel/apply", {"filter": {"tenant": T}, "matched": 2, "newest": 1.0, "reason": "r",
                            "include_expired": True, "expired": 3, "planned_at": 1.0}, "expired"),
    ("/bulk/cancel/apply", {"filter": {"tenant": T}, "matched": 2, "newest": 1.0, "reason": "r",
                            "include_expired": True, "expired": 1, "planned_at": "now"},
     "planned_at"),
])
async def test_include_expired_off_a_cancel_or_not_a_boolean_is_a_400_and_writes_nothing(
        path: str, body: dict[str, Any], says: str) -> None:
    async with api() as (backend, client, tok):
        now = time.time()
        claimed = await _claimed_rows(backend, (now - 60,))
        r = await client.post(path, json=body, headers=_auth(tok["ops"]))
        assert r.status_code == 400, r.text
        assert says in r.json()["error"] and "\n" not in r.json()["error"]
        assert backend.outbox.raw(claimed[0])["state"] == "claimed"  # type: ignore[index]


@pytest.mark.anyio
async def test_a_rerun_planned_again_leaves_the_rows_rerun_already_unless_include_rerun() -> None:
    async with api() as (backend, client, tok):
        (done,) = await _rows(backend, n=1, state="done")
        body: dict[str, Any] = {"filter": {"tenant": T}}
        plan = (await client.post("/bulk/rerun/plan", json=body, headers=_auth(tok["reader"]))).json()
        assert (plan["matched"], plan["already_rerun"]) == (1, 0)
        r = await client.post("/bulk/rerun/apply", headers=_auth(tok["ops"]), json={
            **body, "matched": 1, "newest": plan["newest"], "rate": 1000})
        assert r.status_code == 202, r.text
        assert backend.outbox.raw(f"{done}/rerun/1") is not None
        again = (await client.post("/bulk/rerun/plan", json=body, headers=_auth(tok["reader"]))).json()
        assert (again["matched"], again["already_rerun"]) == (0, 1)
        body["include_rerun"] = True
        asked = (await client.post("/bulk/rerun/plan", json=body, headers=_auth(tok["reader"]))).json()
        assert (asked["matched"], asked["already_rerun"]) == (1, 0)
        r = await client.post("/bulk/rerun/apply", headers=_auth(tok["ops"]), json={
            **body, "matched": 1, "newest": asked["newest"], "rate": 1000})
        assert r.status_code == 202, r.text
        progress = await client.get(r.headers["location"].removeprefix("/api/v1"),
                                    headers=_auth(tok["reader"]))
        assert progress.json()["applied"] == 1 and "include-rerun" in progress.json()["filter"]
        assert backend.outbox.raw(f"{done}/rerun/2") is not None


@pytest.mark.anyio
@pytest.mark.parametrize(("path", "body", "says"), [
    ("/bulk/cancel/plan", {"filter": {"tenant": T}, "include_rerun": True}, "only a rerun"),
    ("/bulk/replay/plan", {"filter": {"tenant": T}, "include_rerun": True}, "only a rerun"),
    ("/bulk/cancel/plan", {"filter": {"tenant": T}, "include_one_shot": True}, "only a rerun"),
    ("/bulk/replay/plan", {"filter": {"tenant": T, "include-one-shot": "true"}}, "only a rerun"),
    ("/bulk/rerun/plan", {"filter": {"tenant": T}, "include_one_shot": "yes"}, "true or false"),
    ("/bulk/rerun/plan", {"filter": {"tenant": T, "include-one-shot": "no"}}, "expected true"),
    ("/bulk/rerun/plan", {"filter": {"tenant": T}, "include_rerun": "yes"}, "true or false"),
    ("/bulk/rerun/plan", {"filter": {"tenant": T}, "include_rerun": 1}, "true or false"),
    ("/bulk/rerun/plan", {"filter": {"tenant": T}, "include_rerun": None}, "true or false"),
    ("/bulk/rerun/plan", {"filter": {"tenant": T}, "include_rerun": {"$ne": False}},
     "true or false"),
    ("/bulk/cancel/apply", {"filter": {"tenant": T}, "matched": 1, "newest": 1e12, "reason": "r",
                            "include_rerun": True}, "only a rerun"),
    ("/bulk/rerun/apply", {"filter": {"tenant": T}, "matched": 1, "newest": 1e12,
                           "include_rerun": [True]}, "true or false"),
])
async def test_include_rerun_off_a_rerun_or_not_a_boolean_is_a_400_and_writes_nothing(
        path: str, body: dict[str, Any], says: str) -> None:
    async with api() as (backend, client, tok):
        (done,) = await _rows(backend, n=1, state="done")
        r = await client.post(path, json=body, headers=_auth(tok["ops"]))
        assert r.status_code == 400, r.text
        assert says in r.json()["error"] and "\n" not in r.json()["error"]
        assert backend.outbox.raw(f"{done}/rerun/1") is None
        assert not backend.outbox.raw(done).get("audit")  # type: ignore[union-attr]
