"""The JSON API's bearer tokens (A8): what is stored of one -- never the secret, only its hash --
its scope, and the rules that read a presented token. A leaf: plain values, no I/O.

A token reads ``bo_<id>_<secret>``: ``id`` names the stored record (listed, revoked by it), the
secret is shown once, at creation, and stored as its SHA-256 (a read of the store gives no
token). Tokens are apart from the console's session and its admin token: a token never opens a
console session, a session cookie never authorizes the API."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Any, Final, Literal

import msgspec

from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.times import Stamp

__all__ = ["ADMIN", "API_TOKENS_COLLECTION", "READ", "SCOPES", "ApiToken", "digest", "matches",
           "parse_token", "split_token", "token_text"]

READ: Final = "read"
ADMIN: Final = "admin"
SCOPES: Final = (READ, ADMIN)
Scope = Literal["read", "admin"]

_TOKEN = re.compile(r"^bo_([a-f0-9]{16})_([A-Za-z0-9_-]{32,86})$")


class ApiToken(msgspec.Struct, frozen=True, kw_only=True):
    """One stored token: ``read`` may call the read endpoints and plan bulk actions; ``admin``
    may also apply them and pause or resume. Revoked: ``revoked_at`` set (kept, for the
    audit)."""

    token_id: str
    name: str
    scope: Scope
    digest: str  # hex SHA-256 of the secret
    created_at: Stamp
    created_by: str = ""
    revoked_at: Stamp | None = None
    revoked_by: str = ""

    def allows(self, scope: str) -> bool:
        return self.revoked_at is None and (self.scope == ADMIN or scope == READ)


API_TOKENS_COLLECTION: Final = "board_outbox_api_tokens"


def parse_token(token_id: str, doc: Mapping[str, Any]) -> ApiToken | None:
    """A stored token document, parsed alone: one that does not decode authorizes nothing and
    is reported once as a bad document (R1)."""
    try:
        return msgspec.convert({**{k: v for k, v in doc.items() if k != "_id"},
                                "token_id": token_id}, ApiToken)
    except (msgspec.ValidationError, TypeError) as exc:
        BAD_DOCUMENTS.report(API_TOKENS_COLLECTION, token_id, f"{exc}: authorizes nothing")
        return None


def digest(secret: str) -> str:
    return hashlib.sha256(b"board-outbox api token\0" + secret.encode()).hexdigest()


def token_text(token_id: str, secret: str) -> str:
    return f"bo_{token_id}_{secret}"


def split_token(text: str) -> tuple[str, str] | None:
    """(id, secret) of a presented token; None: not one."""
    m = _TOKEN.fullmatch(text)
    return None if m is None else (m.group(1), m.group(2))


def matches(token: ApiToken, secret: str) -> bool:
    return hmac.compare_digest(token.digest, digest(secret))
