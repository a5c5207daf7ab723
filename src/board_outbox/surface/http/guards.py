"""Two checks every request to the operator port (and the standalone console) passes before
any route, as ASGI middleware around the whole app:

- ``HeadLimit``: a request line plus headers over ``MAX_HEAD`` bytes is answered 431. h11 alone
  enforces its limit only on a head still incomplete after a read, so a head that arrives whole
  in one read (up to 64 KiB) passed; this counts every head, whatever the reads.
- ``HostCheck``: the ``Host`` header must name this port: a loopback name (``localhost``,
  ``127.0.0.1``, ``::1``), the address it is bound to, one of ``[service] allowed_hosts``, or,
  when bound to every interface (``0.0.0.0``, ``::``), any IP address. Anything else is 400: a
  page on another site whose DNS name is rebound to this address (DNS rebinding) sends its own
  name, never one of these, so it cannot read ``/ui/`` or ``/metrics``. Behind a trusted proxy
  (``proxies.py``, placed before this check) the name checked is the forwarded one."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("board_outbox.http")

MAX_HEAD = 16 * 1024  # request line + headers; past it: 431
LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def head_size(scope: Scope) -> int:
    """The bytes of the request line and headers as sent (``METHOD path?query HTTP/1.1``,
    ``name: value`` lines, the blank line)."""
    qs = scope.get("query_string") or b""
    path = scope.get("raw_path") or str(scope.get("path", "")).encode()
    line = len(scope.get("method", "")) + 1 + len(path) + (1 + len(qs) if qs else 0) + 11
    return line + sum(len(k) + len(v) + 4 for k, v in scope.get("headers", ())) + 2


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port, lower case (``[::1]:80`` -> ``::1``)."""
    h = header.strip().lower()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class AllowedHosts:
    """The names a port answers to (see the module's docstring)."""

    def __init__(self, names: Iterable[str] = (), bound: str = "127.0.0.1") -> None:
        extra = {host_name(n) for n in names}
        self.any = "*" in extra
        self.any_ip = bound.strip().strip("[]") in WILDCARDS
        self.names = frozenset(LOOPBACK | extra | {host_name(bound)})

    def allows(self, header: str | None) -> bool:
        if self.any:
            return True
        if not header:
            return False
        name = host_name(header)
        return name in self.names or (self.any_ip and _is_ip(name))


class HeadLimit:
    def __init__(self, app: ASGIApp, limit: int = MAX_HEAD) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and head_size(scope) > self.limit:
            too_big = PlainTextResponse(f"request head over {self.limit // 1024} KiB\n",
                                        status_code=431, headers={"Connection": "close"})
            await too_big(scope, receive, send)
            return
        await self.app(scope, receive, send)


class HostCheck:
    def __init__(self, app: ASGIApp, allowed: AllowedHosts) -> None:
        self.app, self.allowed = app, allowed
        self._logged: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = next((v.decode("latin-1") for k, v in scope.get("headers", ())
                         if k == b"host"), None)
            if not self.allowed.allows(host):
                shown = (host or "")[:80]
                if len(self._logged) < 100 and shown not in self._logged:
                    self._logged.add(shown)
                    log.warning("operator port: refused a request for Host %r (not this port's: "
                                "[service] allowed_hosts lists more names)", shown)
                refused = PlainTextResponse(
                    "refused: the Host header does not name this server (add the name to "
                    "[service] allowed_hosts)\n", status_code=400)
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)
