"""The operator port's ASGI app (starlette): ``/healthz``, ``/readyz``, ``/metrics`` and, when
``[ui] enabled``, the console under ``/ui`` and the JSON API under ``/api/v1``. Every request
passes an in-flight limit (503 past it) and a body limit (413)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.body_limit import RequestBodyLimitMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from board_outbox.surface.http.checks import SHOWN, degraded, liveness, readiness, stalled_tenants
from board_outbox.surface.http.metrics import exposition

if TYPE_CHECKING:
    from board_outbox.service.runtime import Service

# requests handled at once; past it the answer is 503 at once (a scrape storm or slow store
# cannot pile up tasks and sockets behind a probe)
MAX_IN_FLIGHT = 32
# the console's own budget, apart from the probes': slow pages never starve /healthz
UI_IN_FLIGHT = 8
# no endpoint takes a body bigger than a console form
MAX_BODY = 64 * 1024


class InFlightLimit:
    """ASGI middleware: at most ``limit`` requests in the app at once; the next gets 503 with
    ``Retry-After`` without touching the app."""

    def __init__(self, app: ASGIApp, limit: int = MAX_IN_FLIGHT, skip: str | None = None) -> None:
        self.app = app
        self.limit = limit
        self.skip = skip  # a path prefix counted elsewhere
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.skip and str(scope["path"]).startswith(self.skip)):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            busy = PlainTextResponse("busy: too many requests in flight, retry\n", status_code=503,
                                     headers={"Retry-After": "1"})
            await busy(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


def ops_routes(service: Service) -> list[BaseRoute]:
    """``/healthz`` (liveness), ``/readyz`` (this replica can serve) and ``/metrics``. Both
    probes carry the ``degraded`` detail (stalled or held tenants, a closed change stream) and
    the stalled tenants; neither fails on them (``checks``)."""

    def detail() -> dict[str, object]:
        stalled = stalled_tenants(service)
        return {"degraded": degraded(service), "stalled_tenants": stalled[:SHOWN],
                "stalled_count": len(stalled)}

    async def healthz(_request: Request) -> Response:
        failing = liveness(service)
        more = detail()
        status = "failing" if failing else "degraded" if more["degraded"] else "ok"
        return JSONResponse({"status": status, "failing": failing, **more},
                            status_code=200 if not failing else 503)

    async def readyz(_request: Request) -> Response:
        failing, _stalled = await readiness(service)
        return JSONResponse({"status": "ready" if not failing else "not ready", "failing": failing,
                             **detail()}, status_code=200 if not failing else 503)

    async def metrics(request: Request) -> Response:
        # Prometheus text, or OpenMetrics (with the latency exemplars) when the scraper asks for it
        ctype, body = exposition(service.metrics.prom.registry, request.headers.get("accept", ""))
        return Response(body, media_type=ctype)

    return [Route("/healthz", healthz, methods=["GET"]), Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"])]


def build_app(routes: list[BaseRoute], *, ui: ASGIApp | None = None,
              api: ASGIApp | None = None, limit: int = MAX_IN_FLIGHT,
              not_found: str = "not found: try /healthz, /readyz or /metrics") -> Starlette:
    """The operator port's app: ``routes`` (the probes), the console mounted at ``/ui``, the
    JSON API (A8) at ``/api/v1``, each with its own in-flight budget."""
    routes = list(routes)
    if ui is not None:
        routes.append(Mount("/ui", app=InFlightLimit(ui, limit=UI_IN_FLIGHT), name="ui"))
    if api is not None:
        routes.append(Mount("/api/v1", app=InFlightLimit(api, limit=UI_IN_FLIGHT), name="api"))

    async def missing(_request: Request, _exc: Exception) -> Response:
        return PlainTextResponse(not_found + "\n", status_code=404)

    return Starlette(
        routes=routes,
        middleware=[Middleware(InFlightLimit, limit=limit, skip="/ui"),
                    Middleware(RequestBodyLimitMiddleware, max_body_size=MAX_BODY)],
        exception_handlers={404: missing},
    )
