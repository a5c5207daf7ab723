"""The console's safety rules: read-only unless ``[ui] admin_token`` is set; an action needs a
session opened with the token and still open in the store (a logout ends it on every replica,
a token change ends them all), a form carrying the session's CSRF token, and a request from the
console's own origin. Logins are throttled per client.

Behind a trusted reverse proxy (U3, ``surface/http/proxies.py``) the origin, the client and the
cookie's ``Secure`` flag are the forwarded ones; with ``[ui] identity_header`` the auth proxy
names the operator, and a session is admin only for the name that opened it."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import secrets
import time
from collections import deque
from typing import Any
from urllib.parse import urlsplit

from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from board_outbox.model.errors import BoardOutboxError
from board_outbox.model.records import ConsoleSession
from board_outbox.model.service_documents import SESSION_SECONDS
from board_outbox.ports import SessionStore
from board_outbox.surface.http.proxies import via

__all__ = ["SESSION_COOKIE", "SESSION_SECONDS", "LoginThrottle", "SessionCookies", "Sessions",
           "client_key", "csrf_ok", "csrf_token", "same_origin", "session_secret",
           "token_matches", "token_tag"]

log = logging.getLogger("board_outbox.console")

SESSION_COOKIE = "board_outbox_console"
# wrong admin tokens a client may send within LOGIN_WINDOW_SECONDS; the next login waits (429)
LOGIN_FAILURES = 5
LOGIN_WINDOW_SECONDS = 60.0
THROTTLED_CLIENTS = 4096  # clients remembered at once (the oldest is forgotten first)
_UNREAD = object()


def session_secret(admin_token: str) -> str:
    """The cookie-signing key: derived from the admin token, so that every replica's console
    accepts the same session; without a token (read-only) a random key per process."""
    if not admin_token:
        return secrets.token_hex(32)
    return hashlib.sha256(b"board-outbox console session\0" + admin_token.encode()).hexdigest()


def csrf_token(request: Request) -> str:
    """The session's CSRF token (made on first use); every form carries it."""
    token = request.session.get("csrf")
    if not isinstance(token, str) or len(token) < 32:
        token = request.session["csrf"] = secrets.token_urlsafe(32)
    return token


def token_tag(admin_token: str) -> str:
    """What a stored session keeps of the token it logged in with: a tag (changing the token
    logs every session out), never the token itself."""
    return hashlib.sha256(b"board-outbox console admin\0" + admin_token.encode()).hexdigest()[:32]


def token_matches(given: str, admin_token: str) -> bool:
    return bool(admin_token) and hmac.compare_digest(given.encode(), admin_token.encode())


def _stored_id(sid: str) -> str:
    """The store keeps a hash of the cookie's session id: reading the store gives no cookie."""
    return hashlib.sha256(b"board-outbox console sid\0" + sid.encode()).hexdigest()


class SessionCookies:
    """starlette's ``SessionMiddleware``, its cookie marked ``Secure`` when the request came
    over https (behind a trusted proxy: the scheme the browser used), so that a browser that
    met the console over https never sends the cookie over plain http."""

    def __init__(self, app: ASGIApp, /, **settings: Any) -> None:
        self.plain = SessionMiddleware(app, https_only=False, **settings)
        self.secure = SessionMiddleware(app, https_only=True, **settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        chosen = self.secure if scope.get("scheme") == "https" else self.plain
        await chosen(scope, receive, send)


class Sessions:
    """Logged-in sessions, kept server-side (``SessionStore``): the signed cookie carries only a
    random session id. A session is admin while its stored document exists, has not expired and
    was opened with the current admin token; logging out deletes it, so a copied cookie is
    worth nothing afterwards, on any replica.

    With an identity header (``[ui] identity_header``) the session's name is the one the auth
    proxy gave at login, and each request must carry that same name from a trusted proxy: a
    cookie carried to another operator's browser, or a request around the proxy, is not
    admin."""

    def __init__(self, store: SessionStore | None, admin_token: str,
                 identity_header: str = "") -> None:
        self.store, self.admin_token = store, admin_token
        self.tag = token_tag(admin_token) if admin_token else ""
        self.identity_header = identity_header.strip()

    def proxy_name(self, request: Request) -> tuple[str | None, str]:
        """The operator's name from the auth proxy for this request, or why there is none."""
        v = via(request.scope)
        return v.identity, v.identity_problem

    @property
    def available(self) -> bool:
        return bool(self.admin_token) and self.store is not None

    async def open(self, request: Request, who: str) -> None:
        assert self.store is not None
        sid = secrets.token_urlsafe(32)
        await self.store.open(ConsoleSession(session_id=_stored_id(sid), token_tag=self.tag,
                                             who=who, expires_at=time.time() + SESSION_SECONDS))
        request.session.clear()  # a fresh CSRF token with the new session (no fixation)
        request.session["sid"] = sid
        request.state.admin = who

    async def admin(self, request: Request) -> str | None:
        """The name the request's session logged in with; None: not logged in (no session, one
        closed or expired, or one opened with another token). Read once per request."""
        cached = getattr(request.state, "admin", _UNREAD)
        if cached is not _UNREAD:
            return cached if isinstance(cached, str) else None
        who = None
        sid = request.session.get("sid")
        if self.available and isinstance(sid, str) and 16 <= len(sid) <= 128:
            assert self.store is not None
            found = await self.store.get(_stored_id(sid), time.time())
            if found is not None and hmac.compare_digest(found.token_tag, self.tag):
                who = found.who or "operator"
                if self.identity_header:
                    named, _why = self.proxy_name(request)
                    if named is None or not hmac.compare_digest(named.encode(), who.encode()):
                        who = None
        request.state.admin = who
        return who

    async def admin_or_none(self, request: Request) -> str | None:
        """``admin`` for rendering a page: a store that fails shows the page logged out."""
        try:
            return await self.admin(request)
        except BoardOutboxError:
            request.state.admin = None
            return None

    async def close(self, request: Request) -> None:
        sid = request.session.get("sid")
        request.session.clear()
        request.state.admin = None
        if isinstance(sid, str) and self.store is not None:
            await self.store.close(_stored_id(sid))


def client_key(host: str) -> str:
    """What the login throttle counts a client by: its address, and for IPv6 its /64 (one
    host usually holds a whole /64, so it could pick a fresh address per guess)."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(addr, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((addr, 64), strict=False))
    return str(addr)


class LoginThrottle:
    """At most ``failures`` wrong tokens per client within ``window`` seconds; then the client
    waits until the oldest of them leaves the window. Per process: each replica counts its own
    (one port's attempts are what a guesser can reach there)."""

    def __init__(self, failures: int = LOGIN_FAILURES, window: float = LOGIN_WINDOW_SECONDS,
                 clients: int = THROTTLED_CLIENTS) -> None:
        self.failures, self.window, self.clients = failures, window, clients
        self._seen: dict[str, deque[float]] = {}

    def wait(self, client: str, now: float) -> float:
        """Seconds before ``client`` may try a token again (0: now)."""
        times = self._seen.get(client)
        if times is None:
            return 0.0
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._seen[client]
            return 0.0
        return max(0.0, times[0] + self.window - now) if len(times) >= self.failures else 0.0

    def failed(self, client: str, now: float) -> None:
        times = self._seen.pop(client, None) or deque(maxlen=self.failures)
        times.append(now)
        self._seen[client] = times  # most recent last: the oldest client is forgotten first
        while len(self._seen) > self.clients:
            del self._seen[next(iter(self._seen))]

    def succeeded(self, client: str) -> None:
        self._seen.pop(client, None)


DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin, the port filled in for its scheme; None: not one."""
    try:
        u = urlsplit(url)
        scheme, host, port = u.scheme.lower(), u.hostname, u.port
    except ValueError:
        return None
    if scheme not in DEFAULT_PORTS or not host or u.path or u.query or u.fragment or u.username:
        return None
    return scheme, host.rstrip("."), port if port is not None else DEFAULT_PORTS[scheme]


def same_origin(request: Request) -> bool:
    """A browser names where a POST comes from (``Origin``, ``Sec-Fetch-Site``): it must be the
    console itself -- ``Sec-Fetch-Site`` ``same-origin`` (or ``none``: typed by the user), and an
    ``Origin`` equal to this console's, not one that merely ends like it. The console's origin
    is the request's scheme and ``Host``: behind a trusted proxy, the ones the browser used
    (``https://console.example.com`` equals ``https://console.example.com:443``). A client
    that sends neither (curl) still needs the CSRF token."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    theirs = _origin(origin)
    here = f"{request.url.scheme}://{request.headers.get('host', '')}"
    if theirs is not None and theirs == _origin(here):
        return True
    _origin_refused(origin, here, request)
    return False


_REFUSED_ORIGINS: set[tuple[str, str]] = set()


def _origin_refused(origin: str, here: str, request: Request) -> None:
    """One line per (origin, console origin) pair, at most 100 (a POST from a page elsewhere
    is refused silently after that): behind a proxy, the usual cause is a proxy the console
    does not believe."""
    pair = (origin[:100], here[:100])
    if pair in _REFUSED_ORIGINS or len(_REFUSED_ORIGINS) >= 100:
        return
    _REFUSED_ORIGINS.add(pair)
    v = via(request.scope)
    hint = ("" if v.trusted else
            f"; if the browser reached it through a proxy at {v.peer}, list that address in "
            "[ui] trusted_proxies")
    log.warning("console: refused a POST from origin %r: this console's is %r%s", *pair, hint)


def csrf_ok(request: Request, form_token: object) -> bool:
    expected = request.session.get("csrf")
    return (isinstance(expected, str) and isinstance(form_token, str)
            and hmac.compare_digest(form_token.encode(), expected.encode()) and same_origin(request))
