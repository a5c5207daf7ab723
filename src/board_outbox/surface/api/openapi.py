"""The JSON API's OpenAPI 3.1 document, made from ``routes.ENDPOINTS`` (the routes' own
declaration: a route cannot exist without its entry here)."""

from __future__ import annotations

import re
from typing import Any

from board_outbox.surface.api.routes import ENDPOINTS

__all__ = ["openapi"]

_PARAM = re.compile(r"\{([a-z_]+)\}")


def openapi(version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for ep in ENDPOINTS:
        op: dict[str, Any] = {
            "operationId": ep.name, "summary": ep.summary,
            "security": [{"bearer": []}], "x-scope": ep.scope,
            "parameters": [
                *({"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
                  for n in _PARAM.findall(ep.path)),
                *({"name": n, "in": "query", "required": False, "schema": {"type": "string"}}
                  for n in ep.query)],
            "responses": {
                "200": {"description": "the answer, as JSON"},
                "400": {"description": "bad input: {\"error\": one line}"},
                "401": {"description": "no valid bearer token"},
                "403": {"description": f"the token's scope is not {ep.scope}"}},
        }
        if ep.body:
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "properties": {n: {} for n in ep.body}}}}}
        paths.setdefault(ep.path, {})[ep.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "board-outbox operator API", "version": version,
                 "description": "Reads, bulk actions as plan and apply, pause and resume (A8). "
                                "Scopes: read, admin (`board-outbox api-tokens create`)."},
        "servers": [{"url": "/api/v1"}],
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": paths,
    }
