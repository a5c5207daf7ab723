"""The in-memory ``ApiTokenStore`` (A8): token documents in a dict, shaped as the Mongo adapter
stores them, so a test can plant a malformed one (``put_raw``)."""

from __future__ import annotations

from typing import Any

import msgspec
from anyio.lowlevel import checkpoint

from board_outbox.model.api_tokens import ApiToken, parse_token


class MemoryApiTokenStore:
    def __init__(self) -> None:
        self._docs: dict[str, dict[str, Any]] = {}

    def put_raw(self, token_id: str, doc: dict[str, Any]) -> None:
        self._docs[token_id] = dict(doc)

    async def create(self, token: ApiToken) -> None:
        await checkpoint()
        doc = msgspec.to_builtins(token)
        self._docs[doc.pop("token_id")] = doc

    async def get(self, token_id: str) -> ApiToken | None:
        await checkpoint()
        doc = self._docs.get(token_id)
        return None if doc is None else parse_token(token_id, doc)

    async def all(self) -> list[ApiToken]:
        await checkpoint()
        got = [parse_token(k, d) for k, d in self._docs.items()]
        return sorted((t for t in got if t is not None), key=lambda t: t.created_at)

    async def revoke(self, token_id: str, at: float, by: str) -> bool:
        await checkpoint()
        doc = self._docs.get(token_id)
        if doc is None or doc.get("revoked_at") is not None:
            return False
        doc.update(revoked_at=at, revoked_by=by)
        return True
