"""The JSON API's tokens as use cases (A8): create one (its text shown once), authenticate a
presented one against the store, revoke one. Randomness and time are injected."""

from __future__ import annotations

import secrets
from collections.abc import Callable

from board_outbox.model.api_tokens import (
    SCOPES,
    ApiToken,
    digest,
    matches,
    split_token,
    token_text,
)
from board_outbox.model.clock import Clock
from board_outbox.model.errors import UsageError
from board_outbox.ports import ApiTokenStore

__all__ = ["authenticate", "create_token"]

MAX_NAME = 100


async def create_token(store: ApiTokenStore, *, name: str, scope: str, by: str, clock: Clock,
                       token_hex: Callable[[int], str] = secrets.token_hex,
                       token_urlsafe: Callable[[int], str] = secrets.token_urlsafe,
                       ) -> tuple[str, ApiToken]:
    """A new token: (its text, shown once and never stored; the stored record)."""
    name = name.strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise UsageError(f"api-tokens create: --name: 1 to {MAX_NAME} printable characters")
    if scope not in SCOPES:
        raise UsageError(f"api-tokens create: --scope {scope!r}: one of {', '.join(SCOPES)}")
    token_id, secret = token_hex(8), token_urlsafe(32)
    token = ApiToken(token_id=token_id, name=name, scope=scope,  # type: ignore[arg-type]
                     digest=digest(secret), created_at=clock.now(), created_by=by)
    await store.create(token)
    return token_text(token_id, secret), token


async def authenticate(store: ApiTokenStore, presented: str) -> ApiToken | None:
    """The stored, unrevoked token the presented text is (None: not one, unknown, revoked, or
    its secret does not match). One read of the store, none for text that is not a token."""
    parts = split_token(presented)
    if parts is None:
        return None
    token = await store.get(parts[0])
    if token is None or token.revoked_at is not None or not matches(token, parts[1]):
        return None
    return token
