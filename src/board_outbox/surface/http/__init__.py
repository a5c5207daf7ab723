"""The operator endpoints (O1): ``/healthz``, ``/readyz``, ``/metrics`` on
``[service] http_host:http_port``. A tiny anyio HTTP/1.1 server (GET only, one request per
connection); the exposition is prometheus_client's."""

from __future__ import annotations

from board_outbox.surface.http.checks import liveness, readiness
from board_outbox.surface.http.metrics import ServiceCollector
from board_outbox.surface.http.server import OpsServer, open_ops_server

__all__ = ["OpsServer", "ServiceCollector", "liveness", "open_ops_server", "readiness"]
