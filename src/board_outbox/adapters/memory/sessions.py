"""The in-memory ``SessionStore``: the console's sessions in a dict, shaped as the Mongo adapter
stores them, so a test can plant a malformed one (``put_raw``)."""

from __future__ import annotations

from anyio.lowlevel import checkpoint

from board_outbox.adapters.memory.documents import RawDocuments
from board_outbox.model.records import ConsoleSession
from board_outbox.model.service_documents import console_session


class MemorySessionStore(RawDocuments):
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
