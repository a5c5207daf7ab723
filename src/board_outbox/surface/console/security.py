"""The console's safety rules: read-only unless ``[ui] admin_token`` is set; an action needs a
session that logged in with the token (a signed cookie), a form carrying the session's CSRF token,
and a request from the console's own origin."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from starlette.requests import Request

SESSION_COOKIE = "board_outbox_console"
SESSION_SECONDS = 8 * 3600


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


def is_admin(request: Request, admin_token: str) -> bool:
    return bool(admin_token) and request.session.get("admin") == token_tag(admin_token)


def token_tag(admin_token: str) -> str:
    """What the session stores once logged in: a tag of the token (changing the token logs
    every session out), never the token itself."""
    return hashlib.sha256(b"board-outbox console admin\0" + admin_token.encode()).hexdigest()[:32]


def token_matches(given: str, admin_token: str) -> bool:
    return bool(admin_token) and hmac.compare_digest(given.encode(), admin_token.encode())


def same_origin(request: Request) -> bool:
    """A browser names where a POST comes from (``Origin``, ``Sec-Fetch-Site``): it must be the
    console itself. A client that sends neither (curl) still needs the CSRF token."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return origin == f"{request.url.scheme}://{request.headers.get('host', '')}"


def csrf_ok(request: Request, form_token: object) -> bool:
    expected = request.session.get("csrf")
    return (isinstance(expected, str) and isinstance(form_token, str)
            and hmac.compare_digest(form_token.encode(), expected.encode()) and same_origin(request))
