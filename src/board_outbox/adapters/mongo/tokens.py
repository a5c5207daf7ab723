"""The change stream's resume token on MongoDB."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from board_outbox.adapters.mongo.errors import translated
from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.service_documents import resume_token_problem

STATE = "board_outbox_state"


class MongoResumeTokenStore:
    """The change stream's resume token, one per stream name (shared by every replica: any
    replica resuming from any persisted token is fine, the token only speeds up waking).

    A stored token that cannot be one (not a document with ``_data``) is reported once and
    loads as None (R1): the stream opens at "now" and the first full poll covers the gap. One
    the server refuses all the same is the runtime's to drop (``_waker_loop``)."""

    def __init__(self, db: Any, name: str = "board_events") -> None:
        self.coll = db[STATE]
        self.key = f"resume_token:{name}"

    @translated
    async def load(self) -> Any | None:
        doc = await self.coll.find_one({"_id": self.key})
        if doc is None or doc.get("token") is None:
            return None
        token = doc["token"]
        problem = resume_token_problem(token)
        if problem is not None:
            BAD_DOCUMENTS.report(STATE, self.key, problem)
            return None
        return token

    @translated
    async def save(self, token: Any) -> None:
        # the server's clock, the one its oplog entries carry (A2: the history headroom)
        await self.coll.update_one({"_id": self.key}, {"$set": {"token": token},
                                                       "$currentDate": {"saved_at": True}},
                                   upsert=True)

    @translated
    async def clear(self) -> None:
        await self.coll.delete_one({"_id": self.key})

    @translated
    async def saved_at(self) -> float | None:
        doc = await self.coll.find_one({"_id": self.key}, {"saved_at": 1})
        at = None if doc is None else doc.get("saved_at")
        if not isinstance(at, datetime):
            return None  # no token, or one saved before saved_at existed
        return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()
