"""The JSON API's endpoints (A8), each declared once in ``ENDPOINTS`` -- method, path, scope,
summary, query parameters, body -- from which both the starlette routes and the OpenAPI
document (``openapi.py``) are made. Each handler parses and answers; the work is the engine's
and the surface's use cases (search, explain, bulk plan and apply, pause and resume), as the
console and the CLI call them.

Every request carries ``Authorization: Bearer bo_ID_SECRET`` (``engine/upkeep/api_tokens``): no
token, an unknown, revoked or mismatched one is 401; a read token on an admin endpoint 403. No
cookie is read, so no cross-site request can borrow a browser's session: no CSRF token is needed.
Bad input is a 400 with one line (``{"error": ...}``), never a traceback."""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from board_outbox.engine.upkeep.api_tokens import authenticate
from board_outbox.engine.upkeep.bulk_actions import write_of
from board_outbox.engine.upkeep.bulk_replay import DEFAULT_RATE, apply_bulk, plan_bulk_replay
from board_outbox.engine.upkeep.explain import explain
from board_outbox.engine.upkeep.series import read_window
from board_outbox.model.api_tokens import ADMIN, READ, ApiToken
from board_outbox.model.clock import SystemClock
from board_outbox.model.codec import unreadable
from board_outbox.model.dead_letters import (
    ACTION_STATES,
    CANCEL,
    FAILED_RUN,
    RERUN,
    BulkPlan,
    BulkProgress,
)
from board_outbox.model.errors import (
    BoardOutboxError,
    InvalidRowKey,
    RowNotFound,
    StoreUnavailable,
    UsageError,
)
from board_outbox.model.row_keys import parse_row_key
from board_outbox.ports import Stores
from board_outbox.service.config_sections import Config
from board_outbox.service.health import tenant_statuses
from board_outbox.surface.bulk_filter import parse_filter
from board_outbox.surface.console.bulk import MAX_RATE, BulkJobs, Job
from board_outbox.surface.console.rows import settings_of
from board_outbox.surface.pausing import pause, pauses_on, resume
from board_outbox.surface.row_search import parse_query

__all__ = ["ENDPOINTS", "Endpoint", "api_routes"]

log = logging.getLogger("board_outbox.api")

MAX_MINUTES = 7 * 24 * 60
MAX_BODY_FIELDS = 30


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # under /api/v1
    scope: str  # read | admin
    summary: str
    query: tuple[str, ...] = ()
    body: tuple[str, ...] = ()  # the JSON body's fields
    name: str = ""  # the handler's


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("GET", "/tenants", READ, "every tenant's status", name="tenants"),
    Endpoint("GET", "/rows", READ, "search rows: one of card (with tenant), event (TENANT:SEQ), "
             "seq_range (A..B, with tenant), row_key, state", name="rows",
             query=("card", "event", "seq_range", "row_key", "state", "tenant", "limit")),
    # before /rows/{row_key}, which would take it
    Endpoint("GET", "/rows/{row_key}/explain", READ, "why the row waits", name="explain"),
    Endpoint("GET", "/rows/{row_key}", READ, "one row", name="row"),
    Endpoint("GET", "/dead-letters", READ, "dead-letters, newest first", name="dead_letters",
             query=("tenant", "limit")),
    Endpoint("GET", "/pauses", READ, "the pauses that are on", name="pauses"),
    Endpoint("GET", "/series", READ, "the charts' per-minute figures", name="series",
             query=("minutes",)),
    Endpoint("POST", "/bulk/{action}/plan", READ, "plan a bulk replay, cancel or rerun "
             "(reads only); a cancel's include_expired (true: claimed rows whose lease expired "
             "too, counted as expired); a rerun's include_rerun (true: rows re-run already too, "
             "otherwise counted as already_rerun and left out) and include_one_shot (true: rows of "
             "one-shot subscriptions too)", name="plan",
             body=("filter", "include_expired", "include_rerun", "include_one_shot")),
    Endpoint("POST", "/bulk/{action}/apply", ADMIN, "apply a plan: the filter, the plan's "
             "matched and newest; a cancel's reason; with include_expired, the plan's expired "
             "and planned_at; a rerun's include_rerun and include_one_shot as planned",
             name="apply",
             body=("filter", "matched", "newest", "rate", "reason", "include_expired",
                   "expired", "planned_at", "include_rerun", "include_one_shot")),
    Endpoint("GET", "/bulk/{bulk_id}", READ, "where a bulk action stands", name="progress"),
    Endpoint("POST", "/pauses", ADMIN, "pause a tenant, subscription or bot", name="pause",
             body=("scope", "key", "reason")),
    Endpoint("DELETE", "/pauses/{scope}/{key}", ADMIN, "resume", name="resume"),
)

Handler = Callable[[Request, ApiToken], Awaitable[Response]]


def _json(obj: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status_code=status, media_type="application/json",
                    headers={"Cache-Control": "no-store"})


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status,
                        headers={"Cache-Control": "no-store"})


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        doc = msgspec.json.decode(raw) if raw else {}
    except msgspec.DecodeError:
        raise UsageError("the body is not JSON") from None
    if not isinstance(doc, dict) or len(doc) > MAX_BODY_FIELDS:
        raise UsageError("the body must be a JSON object")
    return doc


def _text(doc: dict[str, Any], name: str) -> str:
    value = doc.get(name, "")
    if not isinstance(value, str):
        raise UsageError(f"{name}: expected a string")
    return value


def _limit(text: str, default: int = 100, most: int = 10_000) -> int:
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= most:
        raise UsageError(f"limit {text[:20]!r}: expected 1 to {most}")
    return int(text)


def _filter_pairs(doc: dict[str, Any]) -> list[tuple[str, str]]:
    flt = doc.get("filter", {})
    if not isinstance(flt, dict) or len(flt) > MAX_BODY_FIELDS:
        raise UsageError("filter: expected an object of KEY: VALUE terms")
    pairs = []
    for k, v in flt.items():
        if not isinstance(v, (str, int)) or isinstance(v, bool):
            raise UsageError(f"filter: {k}: expected a string or a whole number")
        pairs.append((str(k).strip().lower(), str(v).strip()))
    return pairs


def _flag(doc: dict[str, Any], name: str) -> bool:
    """A boolean field of the body: true, false or absent (false); anything else is a
    ``UsageError`` (a string, a number, null, an operator object)."""
    value = doc.get(name, False)
    if not isinstance(value, bool):
        raise UsageError(f"{name}: expected true or false")
    return value


def _one_shot_key(pairs: list[tuple[str, str]]) -> bool:
    """The filter's ``include-one-shot`` key (as a plan's terms name it): true or 1;
    anything else is a ``UsageError``, never read as off."""
    values = [v for k, v in pairs if k == "include-one-shot"]
    if any(v.lower() not in ("true", "1") for v in values):
        raise UsageError("include-one-shot: expected true")
    return bool(values)


def _expired_part(doc: dict[str, Any], include_expired: bool, matched: int) -> tuple[int, float]:
    """A cancel's claimed rows with an expired lease, and when its plan was read (the apply
    takes only leases ended by then, never past now), as the plan said; without
    include_expired, none."""
    expired, planned_at = doc.get("expired", 0), doc.get("planned_at")
    if not include_expired:
        if expired != 0 or planned_at is not None:
            raise UsageError("expired, planned_at: only with include_expired")
        return 0, time.time()
    if not isinstance(expired, int) or isinstance(expired, bool) or not 0 <= expired <= matched:
        raise UsageError("expired: the plan's claimed rows with an expired lease, 0 to matched")
    if not isinstance(planned_at, (int, float)) or isinstance(planned_at, bool) or \
            not math.isfinite(planned_at):
        raise UsageError("planned_at: the plan's time, as the plan said")
    return expired, float(planned_at)


@dataclass
class Api:
    stores: Stores
    config: Config
    jobs: BulkJobs = field(default_factory=BulkJobs)

    async def tenants(self, _r: Request, _t: ApiToken) -> Response:
        got = await tenant_statuses(self.stores, time.time(), live_only=True)
        return _json({"tenants": [got[k] for k in sorted(got)]})

    async def rows(self, r: Request, _t: ApiToken) -> Response:
        p = r.query_params
        q = parse_query(card=p.get("card") or None, event=p.get("event") or None,
                        seq_range=p.get("seq_range") or None, row_key=p.get("row_key") or None,
                        state=p.get("state") or None, tenant=p.get("tenant") or None,
                        limit=_limit(p.get("limit", "")))
        with unreadable() as bad:
            found = await self.stores.outbox.search(q)
        return _json({"rows": found, "unreadable": [
            {"ref": str(e.ref), "detail": e.detail} for e in bad]})

    async def row(self, r: Request, _t: ApiToken) -> Response:
        key = r.path_params["row_key"]
        parse_row_key(key)
        got = await self.stores.outbox.get(key)
        return _error(404, f"no row {key!r}") if got is None else _json(got)

    async def explain(self, r: Request, _t: ApiToken) -> Response:
        x = await explain(self.stores, r.path_params["row_key"], time.time(),
                          settings_of(self.config))
        return _json(x)

    async def dead_letters(self, r: Request, _t: ApiToken) -> Response:
        tenant = r.query_params.get("tenant") or None  # newest parked first
        q = parse_query(state="failed", tenant=tenant, limit=_limit(r.query_params.get("limit", "")))
        return _json({"rows": await self.stores.outbox.search(q)})

    async def pauses(self, _r: Request, _t: ApiToken) -> Response:
        return _json({"pauses": await pauses_on(self.stores)})

    async def series(self, r: Request, _t: ApiToken) -> Response:
        if self.stores.series is None:
            return _error(404, "this backend keeps no series")
        minutes = _limit(r.query_params.get("minutes", ""), default=60, most=MAX_MINUTES)
        w = await read_window(self.stores.series, time.time(), minutes, None)
        return _json({"minutes": w.minutes, "figures": {str(k): v for k, v in w.figures.items()}})

    def _action(self, r: Request) -> str:
        action = r.path_params["action"]
        if action not in ACTION_STATES:
            raise UsageError(f"unknown bulk action {action[:30]!r}: replay, cancel or rerun")
        return str(action)

    def _bulk_filter(self, action: str, doc: dict[str, Any]) -> Any:
        pairs = _filter_pairs(doc)
        one_shot = _flag(doc, "include_one_shot") or _one_shot_key(pairs)
        if one_shot and action != RERUN:
            raise UsageError(f"include_one_shot: only a rerun takes one-shot rows, not a {action}")
        expired = _flag(doc, "include_expired")
        if expired and action != CANCEL:
            raise UsageError(f"include_expired: only a cancel takes claimed rows, not a {action}")
        again = _flag(doc, "include_rerun")
        if again and action != RERUN:
            raise UsageError(f"include_rerun: only a rerun takes rows re-run already, not a {action}")
        flt = parse_filter([kv for kv in pairs if kv[0] != "include-one-shot"], now=time.time())
        return msgspec.structs.replace(flt, state=ACTION_STATES[action],
                                       include_one_shot=one_shot,
                                       include_expired=expired, include_rerun=again)

    async def plan(self, r: Request, _t: ApiToken) -> Response:
        action = self._action(r)
        flt = self._bulk_filter(action, await _body(r))
        got = await plan_bulk_replay(self.stores.outbox, self.stores.subs, flt,
                                     clock=SystemClock(), max_read=50_000)
        return _json(got)

    async def apply(self, r: Request, t: ApiToken) -> Response:
        action = self._action(r)
        doc = await _body(r)
        flt = self._bulk_filter(action, doc)
        matched, newest, rate = doc.get("matched"), doc.get("newest"), doc.get("rate", DEFAULT_RATE)
        if not isinstance(matched, int) or isinstance(matched, bool) or not 0 < matched <= flt.limit:
            raise UsageError("matched: the plan's row count, 1 to the filter's limit")
        if not isinstance(newest, (int, float)) or isinstance(newest, bool) or \
                not math.isfinite(newest):
            raise UsageError("newest: the plan's newest row's time, as the plan said")
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or \
                not 0 < rate <= MAX_RATE:
            raise UsageError(f"rate: rows a second, > 0 and <= {MAX_RATE:g}")
        reason = _text(doc, "reason").strip()
        if action == CANCEL and (not reason or len(reason) > 500 or not reason.isprintable()):
            raise UsageError("reason: a cancel needs one, 1 to 500 printable characters")
        if (busy := self.jobs.running()) is not None:
            return _error(409, f"bulk {busy.progress.action} {busy.progress.bulk_id} is running")
        expired, planned_at = _expired_part(doc, flt.include_expired, matched)
        plan = BulkPlan(filter=flt, planned_at=planned_at, action=action, matched=matched,
                        newest=float(newest), expired=expired)
        by, bulk_id, clock = f"api:{t.name}", uuid.uuid4().hex[:12], SystemClock()
        job = Job(BulkProgress(bulk_id=bulk_id, action=action, by=by, filter=flt.describe(),
                               planned=matched, rate=float(rate), started_at=clock.now()))
        self.jobs.add(job)
        write = write_of(action, self.stores.outbox, bulk_id=bulk_id, by=by, why=reason,
                         clock=clock)

        async def run() -> None:
            try:
                await apply_bulk(self.stores.outbox, self.stores.subs, plan, write,
                                 bulk_id=bulk_id, by=by, clock=clock, rate=float(rate),
                                 stop=job.stop, progress=job.progress)
            except Exception:  # a bug: the progress and the log say so; the API lives
                job.progress.state, job.progress.error = FAILED_RUN, "an unexpected error"
                log.exception("api: bulk %s %s", action, bulk_id)

        return Response(msgspec.json.encode(job.progress), status_code=202,
                        media_type="application/json", background=BackgroundTask(run),
                        headers={"Location": f"{r.scope.get('root_path', '')}/bulk/{bulk_id}"})

    async def progress(self, r: Request, _t: ApiToken) -> Response:
        job = self.jobs.jobs.get(r.path_params["bulk_id"])
        return _error(404, "no such bulk action here") if job is None else _json(job.progress)

    async def pause(self, r: Request, t: ApiToken) -> Response:
        doc = await _body(r)
        new = await pause(self.stores, _text(doc, "scope"), _text(doc, "key"),
                          reason=_text(doc, "reason"), by=f"api:{t.name}", now=time.time())
        return _json({"paused": True, "new": new}, 201 if new else 200)

    async def resume(self, r: Request, t: ApiToken) -> Response:
        lifted = await resume(self.stores, r.path_params["scope"], r.path_params["key"],
                              by=f"api:{t.name}", now=time.time())
        return _json({"resumed": lifted}, 200 if lifted else 404)


def api_routes(stores: Stores, config: Config) -> list[Route]:
    """The endpoints as starlette routes, each behind the bearer check of its scope."""
    api = Api(stores, config)
    routes = []
    for ep in ENDPOINTS:
        path = ep.path.replace("{row_key}", "{row_key:path}")
        routes.append(Route(path, _guarded(stores, ep, getattr(api, ep.name)),
                            methods=[ep.method], name=ep.name))
    return routes


def _guarded(stores: Stores, ep: Endpoint, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        auth = request.headers.get("authorization", "")
        scheme, _, presented = auth.partition(" ")
        if stores.api_tokens is None:
            return _error(404, "this backend keeps no API tokens")
        try:
            token = (await authenticate(stores.api_tokens, presented.strip())
                     if scheme.lower() == "bearer" else None)
        except StoreUnavailable as exc:
            return _error(503, f"the store did not answer: {exc}")
        if token is None:
            return JSONResponse({"error": "a valid bearer token is required"}, status_code=401,
                                headers={"WWW-Authenticate": 'Bearer realm="board-outbox"'})
        if not token.allows(ep.scope):
            log.warning("api: token %s (%s) refused %s %s: needs %s", token.token_id,
                        token.scope, request.method, request.url.path, ep.scope)
            return _error(403, f"this endpoint needs an {ep.scope} token")
        try:
            return await handler(request, token)
        except (UsageError, InvalidRowKey) as exc:
            return _error(400, str(exc).removeprefix("rows find: "))
        except RowNotFound as exc:
            return _error(404, str(exc))
        except StoreUnavailable as exc:
            return _error(503, f"the store did not answer: {exc}")
        except BoardOutboxError as exc:
            return _error(400, str(exc))

    return endpoint
