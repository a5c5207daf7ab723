"""A tiny anyio HTTP/1.1 server for the operator endpoints: GET only, one request per
connection, ``Connection: close``. Enough for probes and a Prometheus scrape, nothing more."""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.stapled import MultiListener

from board_outbox.surface.cli.output import UsageError
from board_outbox.surface.http.checks import liveness, readiness
from board_outbox.surface.http.metrics import ServiceCollector, exposition

if TYPE_CHECKING:
    from board_outbox.service.runtime import Service

log = logging.getLogger("board_outbox.http")

MAX_REQUEST = 8192
READ_TIMEOUT = 5.0
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 400: "Bad Request",
            503: "Service Unavailable"}


class OpsServer:
    def __init__(self, service: Service, listener: MultiListener[SocketStream]) -> None:
        self.service = service
        self.listener = listener
        service.metrics.prom.registry.register(ServiceCollector(service))
        service.status_enabled = True  # per-tenant status and stall detection, for these endpoints

    @property
    def port(self) -> int:
        return int(self.listener.listeners[0].extra(SocketAttribute.local_port))

    async def serve(self) -> None:
        await self.listener.serve(self._handle)

    async def _handle(self, stream: SocketStream) -> None:
        async with stream:
            try:
                with anyio.fail_after(READ_TIMEOUT):
                    head = await _read_head(stream)
                if head is None:
                    return
                line, accept = head
                status, ctype, body = await self.respond(line, accept)
                await stream.send(_response(status, ctype, body))
            except (TimeoutError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
                return
            except Exception as exc:  # one bad request never takes the server down
                log.warning("http request failed: %s: %s", type(exc).__name__, exc)
                try:
                    await stream.send(_response(503, "text/plain", b"internal error\n"))
                except Exception:
                    return

    async def respond(self, request_line: str, accept: str = "") -> tuple[int, str, bytes]:
        parts = request_line.split()
        if len(parts) < 2:
            return 400, "text/plain", b"bad request\n"
        method, path = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"GET only\n"
        if path == "/healthz":
            failing = liveness(self.service)
            return _json(200 if not failing else 503, {
                "status": "ok" if not failing else "failing", "failing": failing})
        if path == "/readyz":
            failing, stalled = await readiness(self.service)
            return _json(200 if not failing else 503, {
                "status": "ready" if not failing else "not ready", "failing": failing,
                "stalled_tenants": stalled})
        if path == "/metrics":
            ctype, body = exposition(self.service.metrics.prom.registry, accept)
            return 200, ctype, body
        return 404, "text/plain", b"not found: try /healthz, /readyz or /metrics\n"


def _json(status: int, doc: object) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(doc, sort_keys=True).encode() + b"\n"


async def _read_head(stream: SocketStream) -> tuple[str, str] | None:
    """The request line and the ``Accept`` header ("" when absent)."""
    buf = b""
    while b"\r\n\r\n" not in buf and b"\n\n" not in buf:
        try:
            chunk = await stream.receive()
        except anyio.EndOfStream:
            break
        buf += chunk
        if len(buf) > MAX_REQUEST:
            return None
    lines = buf.decode("latin-1").split("\n")
    line = lines[0].strip()
    accept = next((h.split(":", 1)[1].strip() for h in lines[1:]
                   if h.lower().startswith("accept:")), "")
    return (line, accept) if line else None


def _response(status: int, ctype: str, body: bytes) -> bytes:
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode("latin-1") + body


@asynccontextmanager
async def open_ops_server(service: Service, host: str, port: int) -> AsyncIterator[OpsServer]:
    """Bind ``host:port`` (a port in use is a ``UsageError``: one line, exit 2) and serve the
    endpoints until the block ends. ``port`` 0 here means any free port (tests); the
    configuration's 0 ("off") is handled by the caller."""
    try:
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port, reuse_port=False)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(f"service.http_port: {host}:{port} is already in use "
                             "(set another port, or 0 to turn the endpoints off)") from None
        raise UsageError(f"service.http_host/http_port: cannot listen on {host}:{port}: "
                         f"{exc.strerror or exc}") from None
    server = OpsServer(service, listener)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()
