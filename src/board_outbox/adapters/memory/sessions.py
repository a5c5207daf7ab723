"""The in-memory ``SessionStore``: the console's sessions in a dict, shaped as the Mongo adapter
stores them, so a test can plant a malformed one (``put_raw``)."""

from __future__ import annotations

from typing import Any

from anyio.lowlevel import checkpoint

from board_outbox.model.records import ConsoleSession
from board_outbox.model.validation import console_session


class MemorySessionStore:
    def __init__(self) -> None:
        self._docs: dict[str, dict[str, Any]] = {}

    def put_raw(self, session_id: str, doc: dict[str, Any]) -> None:
        self._docs[session_id] = dict(doc)

    async def open(self, session: ConsoleSession) -> None:
        await checkpoint()
        self._docs[session.session_id] = {"token_tag": session.token_tag, "who": session.who,
                                          "expires_at": session.expires_at}

    async def get(self, session_id: str, now: float) -> ConsoleSession | None:
        await checkpoint()
        doc = self._docs.get(session_id)
        return None if doc is None else console_session(session_id, doc, now)

    async def close(self, session_id: str) -> None:
        await checkpoint()
        self._docs.pop(session_id, None)
