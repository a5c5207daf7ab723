"""The console's search box (A8): ``GET /rows/find`` with one of ``card`` (and ``tenant``),
``event`` (TENANT:SEQ), ``seq_range`` (A..B, and ``tenant``), ``row_key``, ``state`` (and
optionally ``tenant``) -- parsed as ``rows find`` parses its flags (``surface/row_search``), one
query over an index (``EffectOutbox.search``). The results link each row's page; a search of
pending rows offers "Cancel all matching…" (the bulk cancel's plan, ``bulk.py``), of done rows
"Re-run all matching…"."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from board_outbox.model.codec import unreadable
from board_outbox.model.errors import UsageError
from board_outbox.ports import Stores
from board_outbox.surface.row_search import parse_query

__all__ = ["FIELDS", "search_routes"]

FIELDS = ("card", "event", "seq_range", "row_key", "state", "tenant", "limit")
MAX_FIELD = 600  # characters a search field may hold (a row key's length, and some)

Page = Callable[..., Awaitable[Response]]


def search_routes(stores: Stores, page: Page) -> list[Route]:
    async def find(request: Request) -> Response:
        form = {k: str(request.query_params.get(k, "")).strip()[:MAX_FIELD] for k in FIELDS}
        if not any(form[k] for k in FIELDS if k not in ("tenant", "limit")):
            return await page(request, "rows_find.html", form=form, rows=None, error=None,
                              query=None, bad=[], actions=[])
        try:
            limit = int(form["limit"]) if form["limit"] else 100
            q = parse_query(card=form["card"] or None, event=form["event"] or None,
                            seq_range=form["seq_range"] or None, row_key=form["row_key"] or None,
                            state=form["state"] or None, tenant=form["tenant"] or None,
                            limit=limit)
        except (UsageError, ValueError) as exc:
            msg = str(exc) if isinstance(exc, UsageError) else "limit: expected a whole number"
            return await page(request, "rows_find.html", 400, form=form, rows=None,
                              error=msg.removeprefix("rows find: "), query=None, bad=[], actions=[])
        with unreadable() as bad:
            rows = await stores.outbox.search(q)
        actions = []
        if q.form == "state" and q.state in ("pending", "done"):
            action = "cancel" if q.state == "pending" else "rerun"
            terms = urlencode({"tenant": q.tenant} if q.tenant else {})
            actions.append((f"/rows/{action}/plan?{terms}", f"{action}-matching",
                            "Cancel all matching…" if action == "cancel" else "Re-run all matching…"))
        return await page(request, "rows_find.html", form=form, rows=rows, error=None, query=q,
                          bad=bad, actions=actions)

    return [Route("/rows/find", find, methods=["GET"])]
