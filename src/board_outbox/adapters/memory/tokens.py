"""The in-memory change-feed resume token (the feed's history index)."""

from __future__ import annotations

import time
from typing import Any

from anyio.lowlevel import checkpoint

from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.validation import is_seq

STATE = "board_outbox_state"


class MemoryResumeTokenStore:
    def __init__(self) -> None:
        self.token: Any | None = None
        self.saved: float | None = None

    async def load(self) -> Any | None:
        await checkpoint()
        if self.token is not None and not is_seq(self.token):
            # as the Mongo adapter: a token that cannot be one loads as None, reported once
            BAD_DOCUMENTS.report(STATE, "resume_token", f"token {self.token!r} is not a history "
                                 "index")
            return None
        return self.token

    async def save(self, token: Any) -> None:
        await checkpoint()
        self.token = token
        self.saved = time.time()

    async def clear(self) -> None:
        await checkpoint()  # a waker looping on clear() must still yield, so fail_after fires
        self.token = None
        self.saved = None

    async def saved_at(self) -> float | None:
        await checkpoint()
        return self.saved
