"""The operators' JSON API (A8), mounted at ``/api/v1`` on the operator port beside the console:
``routes.py`` (the endpoints, bearer tokens by scope), ``openapi.py`` (its document, served at
``/api/v1/openapi.json``)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from board_outbox.ports import Stores
from board_outbox.service.config_sections import Config
from board_outbox.surface.api.openapi import openapi
from board_outbox.surface.api.routes import ENDPOINTS, api_routes

__all__ = ["ENDPOINTS", "build_api", "openapi"]


def build_api(stores: Stores, config: Config) -> Starlette:
    """The API app (its routes are relative: mount it at ``/api/v1``)."""
    try:
        ver = version("board-outbox")
    except PackageNotFoundError:
        ver = "0+unknown"
    doc = openapi(ver)

    async def document(_request: Request) -> Response:
        return JSONResponse(doc)

    async def missing(_request: Request, _exc: Exception) -> Response:
        return JSONResponse({"error": "no such endpoint: see /api/v1/openapi.json"},
                            status_code=404)

    return Starlette(routes=[Route("/openapi.json", document, methods=["GET"]),
                             *api_routes(stores, config)],
                     exception_handlers={404: missing})
