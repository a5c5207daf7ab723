"""The operator port on hypercorn: an ASGI app (``app.py``) served inside the caller's anyio task
group on a socket we bind ourselves.

What the server gives us: idle connections and heads that trickle in are closed after
``KEEP_ALIVE`` seconds, an oversize head is answered 431, HEAD has no body, a graceful stop lets a
request in flight finish. What we add: the bind (a port in use is a ``UsageError``: one line,
exit 2), a small listen backlog, and a rate limit on asyncio's "accept() out of system resource"
report, so that running out of file descriptors costs a log line now and then and never the
process (the listener retries once descriptors are free again)."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from hypercorn.asyncio import serve
from hypercorn.config import Config as HypercornConfig
from starlette.types import ASGIApp

from board_outbox.model.errors import UsageError
from board_outbox.surface.http.app import build_app, ops_routes
from board_outbox.surface.http.guards import MAX_HEAD, AllowedHosts, HeadLimit, HostCheck
from board_outbox.surface.http.metrics import ServiceCollector
from board_outbox.surface.http.proxies import ProxyHeaders, ProxySettings, proxy_settings

if TYPE_CHECKING:
    from board_outbox.service.runtime import Service

log = logging.getLogger("board_outbox.http")

KEEP_ALIVE = 5.0  # an idle connection (or one still sending its head) is closed after this
READ_TIMEOUT = 10  # a request body that stops arriving
BACKLOG = 128
GRACE = 3.0  # a request in flight at shutdown gets this long to finish
ACCEPT_REPORT_EVERY = 10.0  # seconds between two "out of file descriptors" lines
ACCEPT_RETRY = 1.0  # asyncio's own pause before it listens again after a failed accept()


class OpsServer:
    """The running operator port (``port``: the port bound, useful when asked for 0)."""

    def __init__(self, port: int) -> None:
        self.port = port


_IN_USE_HINT = {"service.http_port": "set another port, or 0 to turn the endpoints off",
                "ui.port": "set another one with --port or [ui] port"}


def bind(host: str, port: int, setting: str = "service.http_port") -> socket.socket:
    """A listening socket on ``host:port``; a port in use (or any bind failure) is a
    ``UsageError`` naming ``setting``."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family = infos[0][0]
    except (OSError, IndexError) as exc:
        raise UsageError(f"{setting}: cannot listen on {host}:{port}: {exc}") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            hint = _IN_USE_HINT.get(setting, "set another port")
            raise UsageError(f"{setting}: {host}:{port} is already in use ({hint})") from None
        raise UsageError(f"{setting}: cannot listen on {host}:{port}: "
                         f"{exc.strerror or exc}") from None
    return sock


@asynccontextmanager
async def quiet_accept_errors() -> AsyncIterator[None]:
    """asyncio reports every failed ``accept()`` (EMFILE, ENFILE, ENOBUFS...) with a traceback,
    as fast as the loop spins while descriptors are exhausted: thousands a second. Report it
    once per ``ACCEPT_REPORT_EVERY`` seconds with a count; everything else goes to the handler
    that was there before.

    After such a failure asyncio retries serving the listener a second later
    (``_start_serving``); a retry that finds the listener closed (we stopped meanwhile) fails
    with a traceback of its own: those are dropped, and on the way out we stay a little
    longer when a retry may still be pending."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    state = {"reported": -float("inf"), "seen": -float("inf"), "missed": 0}

    def handler(lp: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", ""))
        if message.startswith("socket.accept() out of system resource"):
            now = time.monotonic()
            state["seen"] = now
            if now - state["reported"] < ACCEPT_REPORT_EVERY:
                state["missed"] += 1
                return
            log.error("operator port: cannot accept connections (%s); retrying (%d more since "
                      "the last report)", context.get("exception"), state["missed"])
            state["reported"], state["missed"] = now, 0
            return
        if "_start_serving" in repr(context.get("handle")) and isinstance(
                context.get("exception"), (ValueError, KeyError, OSError)):
            return  # a retry of a listener closed since: nothing left to serve
        if previous is not None:
            previous(lp, context)
        else:
            lp.default_exception_handler(context)

    loop.set_exception_handler(handler)
    try:
        yield
    finally:
        pending = ACCEPT_RETRY + 0.2 - (time.monotonic() - state["seen"])
        if pending > 0:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(pending)
        loop.set_exception_handler(previous)


def hypercorn_config(fd: int) -> HypercornConfig:
    config = HypercornConfig()
    config.bind = [f"fd://{fd}"]
    config.accesslog = None
    config.errorlog = log
    config.keep_alive_timeout = KEEP_ALIVE
    config.read_timeout = READ_TIMEOUT
    config.h11_max_incomplete_size = MAX_HEAD
    config.backlog = BACKLOG
    config.graceful_timeout = GRACE
    config.include_server_header = False
    return config


def guarded(app: ASGIApp, host: str, allowed_hosts: Iterable[str] = (),
            proxies: ProxySettings | None = None) -> ASGIApp:
    """``app`` behind what every request to the port passes: the head limit, then the
    forwarded headers of trusted proxies (``proxies``), then the ``Host`` check (``guards``;
    ``allowed_hosts``: names beside the loopback ones and the address ``host`` bound) -- on
    the forwarded host when a trusted proxy names one."""
    return HeadLimit(ProxyHeaders(HostCheck(app, AllowedHosts(allowed_hosts, host)),
                                  proxies or ProxySettings()))


@asynccontextmanager
async def serve_app(app: ASGIApp, host: str, port: int, setting: str = "service.http_port",
                    allowed_hosts: Iterable[str] = (),
                    proxies: ProxySettings | None = None) -> AsyncIterator[OpsServer]:
    """Serve ``app`` on ``host:port`` until the block ends (``port`` 0: any free port), behind
    ``guarded``'s checks.

    The server runs shielded from outside cancellation and is stopped through its own switch
    (a graceful stop bounded by ``GRACE``): a cancelled caller never leaves the listener open."""
    app = guarded(app, host, allowed_hosts, proxies)
    sock = bind(host, port, setting)
    server = OpsServer(int(sock.getsockname()[1]))
    config = hypercorn_config(sock.detach())  # hypercorn owns the descriptor from here on
    trigger, stopped = anyio.Event(), anyio.Event()
    serving = anyio.CancelScope(shield=True)

    async def run() -> None:
        try:
            with serving:
                await serve(app, config, shutdown_trigger=trigger.wait, mode="asgi")  # type: ignore[arg-type]
        except Exception as exc:  # the probes go quiet; the service carries on
            log.error("operator port stopped: %s: %s", type(exc).__name__, exc)
        finally:
            stopped.set()

    async with quiet_accept_errors(), anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            yield server
        finally:
            trigger.set()
            with anyio.CancelScope(shield=True), anyio.move_on_after(GRACE + 1):
                await stopped.wait()
            serving.cancel()


def unreachable_probes(host: str, env: Mapping[str, str] | None = None) -> str | None:
    """The warning for an operator port bound to a loopback address inside a Kubernetes pod
    (``KUBERNETES_SERVICE_HOST`` is set in every pod): kubelet's probes and Prometheus reach the
    pod by its own address, never its loopback, so every probe would fail. None otherwise."""
    env = os.environ if env is None else env
    if not env.get("KUBERNETES_SERVICE_HOST"):
        return None
    name = host.strip().strip("[]")
    try:
        loopback = name == "localhost" or ipaddress.ip_address(name).is_loopback
    except ValueError:
        return None
    if not loopback:
        return None
    return (f"service.http_host is {host} inside Kubernetes: kubelet's probes and Prometheus "
            "cannot reach the operator port; set BOARD_OUTBOX_SERVICE__HTTP_HOST=0.0.0.0 (or "
            "[service] http_host = \"0.0.0.0\")")


@asynccontextmanager
async def open_ops_server(service: Service, host: str, port: int,
                          ui: ASGIApp | None = None,
                          api: ASGIApp | None = None) -> AsyncIterator[OpsServer]:
    """Serve ``/healthz``, ``/readyz``, ``/metrics`` (and the console under ``/ui`` when given)
    for ``service`` on ``host:port`` until the block ends. A port in use is a ``UsageError``
    (one line, exit 2). ``port`` 0 here means any free port (tests); the configuration's 0
    ("off") is handled by the caller."""
    warning = unreachable_probes(host)
    if warning is not None:
        log.warning(warning)
    collector = ServiceCollector(service)
    registry = service.metrics.prom.registry
    registry.register(collector)
    service.status_enabled = True  # per-tenant status and stall detection, for these endpoints
    try:
        async with serve_app(build_app(ops_routes(service), ui=ui, api=api), host, port,
                             allowed_hosts=service.config.service.allowed_hosts,
                             proxies=proxy_settings(service.config.ui)) as server:
            yield server
    finally:
        registry.unregister(collector)
