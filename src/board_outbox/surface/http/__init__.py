"""The operator endpoints (O1): ``/healthz``, ``/readyz``, ``/metrics`` on
``[service] http_host:http_port``: a starlette app (``app``) on hypercorn (``server``); the
exposition is prometheus_client's. The console (``surface/console``) mounts under ``/ui``."""

from __future__ import annotations

from board_outbox.surface.http.checks import liveness, readiness
from board_outbox.surface.http.metrics import ServiceCollector
from board_outbox.surface.http.server import OpsServer, open_ops_server, serve_app

__all__ = ["OpsServer", "ServiceCollector", "liveness", "open_ops_server", "readiness", "serve_app"]
