"""The console's pages: a starlette app of server-rendered jinja2 templates, mounted at ``/ui``
on the operator port (``run`` with ``[ui] enabled``) or served alone (``board-outbox console``).

Read-only unless ``[ui] admin_token`` is set. The one action, replaying dead-letters, goes
through a confirmation page and ``surface.admin.replay_rows`` (the CLI's replay: audited in the
row, ``by`` = ``console:<name>``)."""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from board_outbox.model.clock import SystemClock
from board_outbox.model.dead_letters import CANCEL, RERUN
from board_outbox.model.domain import FAILED, unreadable
from board_outbox.model.errors import BoardOutboxError
from board_outbox.model.records import RowFilter
from board_outbox.ports import Stores
from board_outbox.service.config_sections import Config
from board_outbox.service.plugins import resolve_handlers
from board_outbox.surface.admin import parse_when, replay_rows
from board_outbox.surface.console.bulk import BulkJobs, bulk_routes
from board_outbox.surface.console.data import ConsoleData, trace_id
from board_outbox.surface.console.pauses import pause_routes, pause_view
from board_outbox.surface.console.rows import row_page
from board_outbox.surface.console.search import search_routes
from board_outbox.surface.console.security import (
    SESSION_COOKIE,
    SESSION_SECONDS,
    LoginThrottle,
    SessionCookies,
    Sessions,
    client_key,
    csrf_ok,
    csrf_token,
    session_secret,
    token_matches,
)
from board_outbox.surface.console.subscriptions import subscription_routes
from board_outbox.surface.console.trends import Trends, chart_routes
from board_outbox.surface.format import age, when
from board_outbox.surface.http.proxies import via
from board_outbox.surface.subscribing import known

if TYPE_CHECKING:
    from board_outbox.service.runtime import Service

log = logging.getLogger("board_outbox.console")

MAX_SELECTION = 500  # rows one replay may name
REFRESH_SECONDS = 5  # the overview reloads itself this often


def _when(epoch: float | None) -> str:
    """A time on a page (R7: guarded, ``times.when``); 0 or None: none recorded."""
    return "-" if not epoch else when(epoch)


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(loader=jinja2.PackageLoader("board_outbox.surface.console", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["ago"] = lambda seconds: age(seconds, days=True)
    env.filters["when"] = _when
    env.globals["trace_id"] = trace_id
    env.globals["inf"] = float("inf")
    return Jinja2Templates(env=env)


def build_console(stores: Stores, config: Config, service: Service | None = None) -> Starlette:
    """The console app (its routes are relative: mount it at ``/ui``)."""
    data = ConsoleData(stores, config, service)
    trends = Trends(stores, config)  # the charts: /charts and the sparklines
    templates = _templates()
    admin_token, jaeger = config.ui.admin_token, config.ui.jaeger_url.rstrip("/")
    mode = (f"replica {service.ownership.member_id}" if service is not None
            else "standalone console")
    where = (config.store.backend if config.store.backend == "memory"
             else f"mongo database {config.store.database}")

    sessions = Sessions(stores.sessions, admin_token, config.ui.identity_header)
    throttle = LoginThrottle()

    async def page(request: Request, name: str, status: int = 200,
                   headers: dict[str, str] | None = None,
                   background: BackgroundTask | None = None, **ctx: Any) -> Response:
        base = request.scope.get("root_path", "")
        admin = await sessions.admin_or_none(request) is not None
        return templates.TemplateResponse(request, name, {
            "base": base, "admin": admin, "can_admin": sessions.available,
            "csrf": csrf_token(request), "mode": mode, "where": where, "jaeger": jaeger,
            "now": time.time(), **ctx}, status_code=status,
            headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                     "Content-Security-Policy": "default-src 'self'; style-src 'unsafe-inline'",
                     "Referrer-Policy": "same-origin", **(headers or {})}, background=background)

    async def refused(request: Request, why: str) -> Response:
        log.warning("console: refused %s %s: %s", request.method, request.url.path, why)
        return await page(request, "message.html", 403, title="Refused", message=why)

    async def overview(request: Request) -> Response:
        raw = request.query_params.get("page", "1")
        number = int(raw) if raw.isdigit() and 0 < len(raw) < 7 else 1
        ov = await data.overview(max(1, number))
        # alone: the view of who needs a look is past its age -- read anew after this response
        after = BackgroundTask(data.refresh_view) if data.refresh_due() else None
        return await page(request, "overview.html", ov=ov, refresh=REFRESH_SECONDS,
                          background=after,
                          spark=await trends.sparklines([t.tenant_id for t in ov.tenants]),
                          pv=await pause_view(stores))

    async def find_tenant(request: Request) -> Response:
        """The overview's "open a tenant" form: straight to that tenant's page."""
        tenant_id = request.query_params.get("id", "").strip()
        base = request.scope.get("root_path", "")
        where = f"{base}/tenants/{quote(tenant_id, safe='')}" if tenant_id else f"{base}/"
        return RedirectResponse(where, status_code=303)

    async def tenant(request: Request) -> Response:
        tenant_id = request.path_params["tenant_id"]
        tp = await data.tenant(tenant_id)
        if tp is None:
            return await page(request, "message.html", 404, title="No such tenant",
                        message=f"The store knows no tenant {tenant_id!r}.")
        return await page(request, "tenant.html", tp=tp, pv=await pause_view(stores, tenant_id))

    async def dead_letters(request: Request) -> Response:
        q = request.query_params
        form = {k: q.get(k, "").strip() for k in ("tenant", "kind", "sub", "since", "until", "limit")}
        try:
            limit = int(form["limit"] or 100)
            if not 1 <= limit <= 5000:
                raise ValueError("limit: 1 to 5000 rows")
            since = parse_when(form["since"]) if form["since"] else None
            until = parse_when(form["until"]) if form["until"] else None
        except ValueError as exc:
            return await page(request, "dead_letters.html", 400, rows=[], form=form, error=str(exc),
                              unreadable=[])
        read = limit if not form["sub"] else min(max(limit * 10, 1000), 5000)
        flt = RowFilter(tenant_id=form["tenant"] or None, states=(FAILED,), kind=form["kind"] or None,
                        updated_after=since, updated_before=until, limit=read)
        with unreadable() as bad:  # R1, R7: each costs only itself, and is named
            rows = (await data.dead_letters(flt, form["sub"] or None))[:limit]
        return await page(request, "dead_letters.html", rows=rows, form=form, error=None,
                          unreadable=bad)

    async def row(request: Request) -> Response:
        """The row and why it waits (``rows.row_page``: ``explain``'s answer)."""
        got = await row_page(data.stores, config, request.path_params["row_key"], time.time())
        if isinstance(got, str):
            return await page(request, "message.html", 404, title="No such row", message=got)
        return await page(request, "row.html", row=got.row, x=got.x, doc=got.doc)

    async def action_form(request: Request) -> tuple[list[str], str] | Response:
        """The posted row keys after the safety checks, or the refusal."""
        if not admin_token:
            return await refused(request, "This console is read-only: no [ui] admin_token is configured.")
        async with request.form(max_files=0, max_fields=MAX_SELECTION + 10,
                                max_part_size=16 * 1024) as form:
            token, keys = form.get("csrf"), [str(k) for k in form.getlist("key")]
        if not csrf_ok(request, token):
            return await refused(request, "The form's security token or origin does not match this "
                                    "session: reload the page and try again.")
        who = await sessions.admin(request)
        if who is None:
            return await refused(request, "Replaying needs the admin token: log in first.")
        if not keys:
            return await page(request, "message.html", 400, title="Nothing selected",
                        message="Select at least one dead-letter to replay.")
        if len(keys) > MAX_SELECTION:
            return await page(request, "message.html", 400, title="Too many rows",
                        message=f"At most {MAX_SELECTION} rows per replay.")
        return list(dict.fromkeys(keys)), who

    async def confirm(request: Request) -> Response:
        got = await action_form(request)
        if isinstance(got, Response):
            return got
        keys, who = got
        rows = [(k, await data.row(k)) for k in keys]
        return await page(request, "confirm.html", rows=rows, who=who,
                    replayable=sum(1 for _k, r in rows if r is not None and r.state == FAILED))

    async def replay(request: Request) -> Response:
        got = await action_form(request)
        if isinstance(got, Response):
            return got
        keys, who = got
        by = f"console:{who}"
        done = await replay_rows(data.stores.outbox, keys, SystemClock(), by)
        log.info("console: %s replayed %d of %d dead-letters", by, len(done), len(keys),
                 extra={"row_keys": done})
        return await page(request, "replayed.html", done=done, left=[k for k in keys if k not in done],
                    by=by)

    async def login(request: Request) -> Response:
        named, unnamed = sessions.proxy_name(request)
        header = sessions.identity_header
        if request.method == "GET":
            return await page(request, "login.html", error=None, header=header, named=named)
        if not sessions.available:
            return await refused(request, "This console is read-only: no [ui] admin_token is configured.")
        async with request.form(max_files=0, max_fields=10, max_part_size=4096) as form:
            token, given, who = form.get("csrf"), str(form.get("token") or ""), str(form.get("who") or "")
        if not csrf_ok(request, token):
            return await refused(request, "The form's security token or origin does not match this "
                                    "session: reload the page and try again.")
        if header and named is None:  # U3: the auth proxy names the operator, or no one logs in
            return await refused(request, f"This console names its operators by the {header} "
                                          f"header from a trusted proxy, and this request has "
                                          f"none ({unnamed}): open it through the auth proxy.")
        address = request.client.host if request.client else "?"
        client, now = client_key(address), time.monotonic()
        wait = throttle.wait(client, now)
        if wait > 0:  # refused before the token is even compared: guessing costs time
            log.warning("console: login from %s refused: too many wrong admin tokens", address)
            retry = max(1, math.ceil(wait))
            return await page(request, "login.html", 429, headers={"Retry-After": str(retry)},
                              header=header, named=named,
                              error=f"Too many wrong admin tokens from this address: try again "
                                    f"in {retry} s.")
        if not token_matches(given, admin_token):
            throttle.failed(client, now)
            log.warning("console: a login from %s with a wrong admin token", address)
            return await page(request, "login.html", 403, error="That is not the admin token.",
                              header=header, named=named)
        throttle.succeeded(client)
        name = named or "".join(c for c in who.strip() if c.isprintable())[:64] or "operator"
        await sessions.open(request, name)
        peer = via(request.scope).peer
        log.info("console: %s logged in from %s%s", name, address,
                 f" (through the proxy at {peer})" if peer != address else "")
        return RedirectResponse(request.scope.get("root_path", "") + "/", status_code=303)

    async def logout(request: Request) -> Response:
        async with request.form(max_files=0, max_fields=10, max_part_size=4096) as form:
            token = form.get("csrf")
        if not csrf_ok(request, token):
            return await refused(request, "The form's security token does not match this session.")
        await sessions.close(request)
        return RedirectResponse(request.scope.get("root_path", "") + "/", status_code=303)

    async def store_error(request: Request, exc: Exception) -> Response:
        """The store failing (or a document it cannot decode) costs this page, not the console."""
        log.warning("console: %s %s: %s: %s", request.method, request.url.path,
                    type(exc).__name__, exc)
        return await page(request, "message.html", 503, title="The store did not answer",
                    message=f"{type(exc).__name__}: {exc}. The page shows again once it does.")

    async def gone(request: Request, _exc: Exception) -> Response:
        """The client went away, or its body stopped arriving and the server cut it
        (``read_timeout``): nothing to render, nothing to log as an error."""
        log.info("console: %s %s: the request body did not arrive", request.method,
                 request.url.path)
        return Response("request body did not arrive\n", status_code=408,
                        media_type="text/plain", headers={"Connection": "close"})

    jobs = BulkJobs()  # one bulk action at a time in this console, whichever
    app = Starlette(
        exception_handlers={BoardOutboxError: store_error, ClientDisconnect: gone},
        routes=[
            Route("/", overview, methods=["GET"]),
            Route("/tenants", find_tenant, methods=["GET"]),
            Route("/tenants/{tenant_id}", tenant, methods=["GET"]),
            Route("/dead-letters", dead_letters, methods=["GET"]),
            # A8: the search box and the bulk cancel and rerun, before the row pages' catch-all
            *search_routes(stores, page),
            *[r for action in (CANCEL, RERUN) for r in bulk_routes(
                stores=data.stores, page=page, refused=refused, sessions=sessions,
                admin_token=admin_token, jobs=jobs, action=action)],
            Route("/rows/{row_key:path}", row, methods=["GET"]),
            Route("/replay/confirm", confirm, methods=["POST"]),
            Route("/replay", replay, methods=["POST"]),
            *bulk_routes(stores=data.stores, page=page, refused=refused, sessions=sessions,
                         admin_token=admin_token, jobs=jobs),
            Route("/login", login, methods=["GET", "POST"]),
            Route("/logout", logout, methods=["POST"]),
            *pause_routes(stores, sessions, admin_token, page, refused),  # F3
            *chart_routes(trends, page),
            *subscription_routes(stores, sessions, admin_token, page, refused,  # P6
                                 known(resolve_handlers(config.handlers))),
        ],
        middleware=[Middleware(SessionCookies, secret_key=session_secret(admin_token),
                               session_cookie=SESSION_COOKIE, max_age=SESSION_SECONDS,
                               same_site="strict")],
    )
    app.state.console = data  # its reads (the benchmark's baseline turns their sharing off)
    return app
