"""The console's pauses (F3): the pauses that are on, on the overview, the tenant page and
their own page (``/pauses``), and, for an admin, the forms that pause and resume -- each POST
checked as the replay is (an admin session still open in the store, the session's CSRF token,
the console's own origin) and written by ``surface.pausing`` (the CLI's pause and resume:
audited in the pause document, ``by`` = ``console:<name>``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from board_outbox.model.bad_documents import BAD_DOCUMENTS, BadDocument, cap
from board_outbox.model.errors import BoardOutboxError, UsageError
from board_outbox.model.pause import PAUSES_COLLECTION, SCOPES, Pause
from board_outbox.model.rows import PENDING
from board_outbox.ports import Stores
from board_outbox.surface.console.security import Sessions, csrf_ok
from board_outbox.surface.pausing import check_pause, pause, pauses_on, resume, unknown

__all__ = ["PauseView", "pause_routes", "pause_view"]

log = logging.getLogger("board_outbox.console")

Page = Callable[..., Awaitable[Response]]
Refused = Callable[[Request, str], Awaitable[Response]]


@dataclass
class PauseView:
    """What a page shows of the pauses: those on (None: the store did not answer, ``error``
    says why: the page still renders) and the pause documents that do not parse."""

    on: list[Pause] | None
    bad: list[BadDocument] = field(default_factory=list)
    error: str = ""
    held: int | None = None  # the tenant page's: its pending rows held by a pause (None: unknown)

    def of_tenant(self, tenant_id: str) -> Pause | None:
        return next((p for p in self.on or [] if p.scope == "tenant" and p.key == tenant_id),
                    None)


async def pause_view(stores: Stores, tenant_id: str | None = None) -> PauseView:
    """The pauses on, read once for a page (with ``tenant_id``: also how many of the tenant's
    rows are held, one aggregate over its pending rows); a store that fails costs this panel
    only."""
    if stores.pauses is None:
        return PauseView(on=[])
    try:
        on = await pauses_on(stores)
        held = None
        if tenant_id is not None and stores.status is not None:
            summary = (await stores.status.row_summary([tenant_id], [PENDING])).get(tenant_id)
            held = summary.held if summary is not None else 0
    except BoardOutboxError as exc:
        return PauseView(on=None, error=cap(f"{type(exc).__name__}: {exc}", 300))
    return PauseView(on=on, held=held, bad=[d for d in BAD_DOCUMENTS.current()
                                            if d.collection == PAUSES_COLLECTION])


def pause_routes(stores: Stores, sessions: Sessions, admin_token: str, page: Page,
                 refused: Refused) -> list[Route]:
    """``GET /pauses``, ``POST /pauses/pause``, ``POST /pauses/resume`` (mount with the app)."""

    async def pauses(request: Request) -> Response:
        return await page(request, "pauses.html", pv=await pause_view(stores), scopes=SCOPES,
                          form={"scope": "tenant", "key": "", "reason": ""}, error=None)

    async def action(request: Request) -> tuple[dict[str, str], str] | Response:
        """The posted form after the safety checks (the replay's), or the refusal."""
        if not admin_token:
            return await refused(request, "This console is read-only: no [ui] admin_token is "
                                          "configured.")
        async with request.form(max_files=0, max_fields=10, max_part_size=4096) as raw:
            form = {k: str(raw.get(k) or "") for k in ("csrf", "scope", "key", "reason",
                                                       "back", "force")}
        if not csrf_ok(request, form["csrf"]):
            return await refused(request, "The form's security token or origin does not match "
                                          "this session: reload the page and try again.")
        who = await sessions.admin(request)
        if who is None:
            return await refused(request, "Pausing and resuming need the admin token: log in "
                                          "first.")
        return form, who

    def back(request: Request, form: dict[str, str]) -> Response:
        base = request.scope.get("root_path", "")
        where = f"{base}/pauses"
        if form["back"] == "tenant" and form["scope"] == "tenant":
            where = f"{base}/tenants/{quote(form['key'], safe='')}"
        elif form["back"] == "overview":
            where = f"{base}/"
        return RedirectResponse(where, status_code=303)

    async def bad_form(request: Request, form: dict[str, str], why: str) -> Response:
        return await page(request, "pauses.html", 400, pv=await pause_view(stores),
                          scopes=SCOPES, form=form, error=why)

    async def do_pause(request: Request) -> Response:
        got = await action(request)
        if isinstance(got, Response):
            return got
        form, who = got
        scope, key = form["scope"], form["key"].strip()
        form["key"] = key
        try:
            check_pause(scope, key, reason=form["reason"].strip(), by=f"console:{who}")
            if not form["force"] and (why := await unknown(stores, scope, key)) is not None:
                raise UsageError(f"{why}; tick \"even so\" to pause it anyway")
            await pause(stores, scope, key, reason=form["reason"].strip(),
                        by=f"console:{who}", now=time.time())
        except UsageError as exc:
            return await bad_form(request, form, str(exc))
        return back(request, form)

    async def do_resume(request: Request) -> Response:
        got = await action(request)
        if isinstance(got, Response):
            return got
        form, who = got
        try:
            lifted = await resume(stores, form["scope"], form["key"], by=f"console:{who}",
                                  now=time.time())
        except UsageError as exc:
            return await bad_form(request, form, str(exc))
        if not lifted:
            return await bad_form(request, form, f"{form['scope']} {form['key']} is not paused.")
        return back(request, form)

    return [Route("/pauses", pauses, methods=["GET"]),
            Route("/pauses/pause", do_pause, methods=["POST"]),
            Route("/pauses/resume", do_resume, methods=["POST"])]

