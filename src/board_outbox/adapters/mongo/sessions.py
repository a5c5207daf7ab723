"""``board_outbox_console_sessions`` on MongoDB: the console's logged-in sessions, shared by
every replica's console, so a logout ends a session everywhere.

``{_id: <hash of the cookie's session id>, token_tag, who, expires_at, expire_at}``: the TTL
index on ``expire_at`` (a date) removes ended sessions; ``get`` checks ``expires_at`` itself (the
TTL monitor runs once a minute)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from board_outbox.adapters.mongo.errors import translated
from board_outbox.model.records import ConsoleSession
from board_outbox.model.service_documents import SESSIONS_COLLECTION, console_session

SESSIONS = SESSIONS_COLLECTION


class MongoSessionStore:
    def __init__(self, db: Any) -> None:
        self.coll = db[SESSIONS]

    @translated
    async def open(self, session: ConsoleSession) -> None:
        await self.coll.insert_one({
            "_id": session.session_id, "token_tag": session.token_tag, "who": session.who,
            "expires_at": session.expires_at,
            "expire_at": datetime.fromtimestamp(session.expires_at, UTC)})

    @translated
    async def get(self, session_id: str, now: float) -> ConsoleSession | None:
        doc = await self.coll.find_one({"_id": session_id})
        return None if doc is None else console_session(session_id, doc, now)

    @translated
    async def close(self, session_id: str) -> None:
        await self.coll.delete_one({"_id": session_id})
