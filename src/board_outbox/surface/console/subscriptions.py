"""The console's subscriptions (P6): the list (``/subscriptions``, a stored document that does
not decode named with its problem), one subscription with its audit (``/subscriptions/ID``),
and, for an admin, the forms that add, edit, disable, enable and remove one -- each POST checked
as every console action is (an admin session still open in the store, the session's CSRF
token, the console's own origin) and written by ``surface.subscribing`` (the CLI's own module:
the service's decoder, the revision check, the audit in the document, ``by`` =
``console:<name>``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from board_outbox.model.errors import UsageError
from board_outbox.model.subscription_records import SubscriptionRecord
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import Stores
from board_outbox.surface import subscribing as s
from board_outbox.surface.console.security import Sessions, csrf_ok

__all__ = ["FORM_FIELDS", "form_fields", "subscription_routes"]

log = logging.getLogger("board_outbox.console")

Page = Callable[..., Awaitable[Response]]
Refused = Callable[[Request, str], Awaitable[Response]]

FORM_FIELDS = ("sub_id", "tenant_id", "bot", "kind", "event_types", "column", "labels_all",
               "consume_labels", "priority", "coalesce_quiet", "coalesce_max_wait",
               "max_in_flight", "max_per_second", "enabled")


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _number(name: str, text: str, kind: type) -> Any:
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise UsageError(f"{name}: expected {what}, got {text[:40]!r}") from None


def form_fields(form: Mapping[str, str]) -> dict[str, Any]:
    """The posted form as a subscription's fields (``subscribing.build`` judges them): lists
    are comma-separated, an empty number or column is "not set"."""
    def get(key: str) -> str:
        return form.get(key, "").strip()

    fields: dict[str, Any] = {
        "sub_id": get("sub_id"), "tenant_id": get("tenant_id"), "bot": get("bot"),
        "kind": get("kind") or "launch", "enabled": bool(get("enabled")),
        "rule": {"event_types": _names(get("event_types")),
                 "column": get("column") or None, "labels_all": _names(get("labels_all"))},
        "consume_labels": _names(get("consume_labels")),
        "priority": _number("priority", get("priority"), int) if get("priority") else 0,
    }
    quiet, wait = get("coalesce_quiet"), get("coalesce_max_wait")
    if quiet or wait:
        if not (quiet and wait):
            raise UsageError("coalesce: give both the quiet time and the longest wait")
        fields["coalesce"] = {"quiet_seconds": _number("coalesce quiet", quiet, float),
                              "max_wait_seconds": _number("coalesce max wait", wait, float)}
    if get("max_in_flight"):
        fields["max_in_flight"] = _number("max in flight", get("max_in_flight"), int)
    if get("max_per_second"):
        fields["max_per_second"] = _number("max per second", get("max_per_second"), float)
    return fields


def _form_of(sub: Subscription | None) -> dict[str, str]:
    """A subscription as the form shows it."""
    if sub is None:
        return {**dict.fromkeys(FORM_FIELDS, ""), "kind": "launch", "enabled": "1"}
    c = sub.coalesce
    return {"sub_id": sub.sub_id, "tenant_id": sub.tenant_id, "bot": sub.bot, "kind": sub.kind,
            "event_types": ", ".join(sub.rule.event_types), "column": sub.rule.column or "",
            "labels_all": ", ".join(sub.rule.labels_all),
            "consume_labels": ", ".join(sub.consume_labels), "priority": str(sub.priority),
            "coalesce_quiet": f"{c.quiet_seconds:g}" if c else "",
            "coalesce_max_wait": f"{c.max_wait_seconds:g}" if c else "",
            "max_in_flight": "" if sub.max_in_flight is None else str(sub.max_in_flight),
            "max_per_second": "" if sub.max_per_second is None else f"{sub.max_per_second:g}",
            "enabled": "1" if sub.enabled else ""}


def subscription_routes(stores: Stores, sessions: Sessions, admin_token: str, page: Page,
                        refused: Refused, kinds: Collection[str]) -> list[Route]:
    """``GET /subscriptions``, ``GET /subscriptions/{sub_id}`` and the admin's POSTs (mount with
    the app). ``kinds``: the effect kinds this configuration runs."""

    def base(request: Request) -> str:
        return str(request.scope.get("root_path", ""))

    async def listing(request: Request, status: int = 200, form: dict[str, str] | None = None,
                      error: str | None = None) -> Response:
        tenant = request.query_params.get("tenant", "").strip() or None
        recs: list[SubscriptionRecord] = []
        try:
            recs = await s.listing(stores, tenant)
        except UsageError as exc:
            error, status = str(exc), 400
        return await page(request, "subscriptions.html", status, recs=recs, tenant=tenant or "",
                          summary=s.summary, form=form or _form_of(None), error=error,
                          kinds=sorted(kinds))

    async def one(request: Request, status: int = 200, form: dict[str, str] | None = None,
                  error: str | None = None, rec: SubscriptionRecord | None = None) -> Response:
        try:
            rec = rec or await s.record(stores, request.path_params["sub_id"])
        except UsageError as exc:
            return await page(request, "message.html", 404, title="No such subscription",
                              message=str(exc))
        return await page(request, "subscription.html", status, rec=rec, summary=s.summary,
                          form=form or _form_of(rec.sub), error=error, kinds=sorted(kinds))

    async def action(request: Request) -> tuple[dict[str, str], str] | Response:
        """The posted form after the safety checks (every console action's), or the refusal."""
        if not admin_token:
            return await refused(request, "This console is read-only: no [ui] admin_token is "
                                          "configured.")
        async with request.form(max_files=0, max_fields=30, max_part_size=8192) as raw:
            form = {k: str(raw.get(k) or "") for k in (*FORM_FIELDS, "csrf", "rev", "force",
                                                       "confirm")}
        if not csrf_ok(request, form["csrf"]):
            return await refused(request, "The form's security token or origin does not match "
                                          "this session: reload the page and try again.")
        who = await sessions.admin(request)
        if who is None:
            return await refused(request, "Changing subscriptions needs the admin token: log "
                                          "in first.")
        return form, f"console:{who}"

    def to_one(request: Request, sub_id: str) -> Response:
        return RedirectResponse(f"{base(request)}/subscriptions/{quote(sub_id, safe='')}",
                                status_code=303)

    def allowed(form: dict[str, str]) -> Collection[str] | None:
        return None if form["force"] else kinds

    async def add(request: Request) -> Response:
        got = await action(request)
        if isinstance(got, Response):
            return got
        form, by = got
        try:
            sub = s.build(form_fields(form), kinds=allowed(form))
            await s.add(stores, sub, by=by, now=time.time())
        except UsageError as exc:
            return await listing(request, 400, form, str(exc))
        return to_one(request, sub.sub_id)

    async def current(request: Request, form: dict[str, str]) -> SubscriptionRecord:
        """The stored subscription, still at the revision the page showed (else ``Changed``)."""
        rec = await s.record(stores, request.path_params["sub_id"])
        if str(rec.rev) != form["rev"]:
            raise s.Changed("It changed since this page was opened (another operator?): "
                            "nothing written. Look again and retry.")
        return rec

    async def edit(request: Request) -> Response:
        got = await action(request)
        if isinstance(got, Response):
            return got
        form, by = got
        sub_id = request.path_params["sub_id"]
        try:
            rec = await current(request, form)
            fields = form_fields({**form, "sub_id": sub_id,
                                  "tenant_id": rec.tenant_id or form["tenant_id"]})
            await s.replace(stores, rec, s.build(fields, kinds=allowed(form)), by=by,
                            now=time.time())
        except UsageError as exc:
            return await one(request, 400, form, str(exc))
        except s.Changed as exc:
            return await one(request, 409, None, str(exc))
        return to_one(request, sub_id)

    async def toggle(request: Request) -> Response:
        got = await action(request)
        if isinstance(got, Response):
            return got
        form, by = got
        sub_id, enable = request.path_params["sub_id"], request.url.path.endswith("/enable")
        try:
            await current(request, form)
            await s.set_enabled(stores, sub_id, enable, by=by, now=time.time())
        except UsageError as exc:
            return await one(request, 400, None, str(exc))
        except s.Changed as exc:
            return await one(request, 409, None, str(exc))
        return to_one(request, sub_id)

    async def remove(request: Request) -> Response:
        got = await action(request)
        if isinstance(got, Response):
            return got
        form, by = got
        sub_id = request.path_params["sub_id"]
        if form["confirm"] != "yes":
            return await one(request, 400, None, "Tick the box to confirm the removal.")
        try:
            await current(request, form)
            await s.remove(stores, sub_id, by=by, now=time.time())
        except UsageError as exc:
            return await one(request, 400, None, str(exc))
        except s.Changed as exc:
            return await one(request, 409, None, str(exc))
        return RedirectResponse(f"{base(request)}/subscriptions", status_code=303)

    return [Route("/subscriptions", listing, methods=["GET"]),
            Route("/subscriptions/add", add, methods=["POST"]),
            Route("/subscriptions/{sub_id}", one, methods=["GET"]),
            Route("/subscriptions/{sub_id}/edit", edit, methods=["POST"]),
            Route("/subscriptions/{sub_id}/enable", toggle, methods=["POST"]),
            Route("/subscriptions/{sub_id}/disable", toggle, methods=["POST"]),
            Route("/subscriptions/{sub_id}/remove", remove, methods=["POST"])]
