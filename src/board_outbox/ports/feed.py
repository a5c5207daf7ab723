"""The change feed and its resume token: the one change stream a replica follows, and where
it resumes after a restart."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Collection
from typing import Any, Protocol

from board_outbox.model.records import Change

__all__ = ["ChangeFeed", "ResumeTokenStore"]


class ChangeFeed(Protocol):
    def watch(
        self, resume_token: Any | None, *, exclude: Collection[str] = (),
        pace: Callable[[], Awaitable[None]] | None = None,
    ) -> AsyncGenerator[Change, None]:
        """One stream per replica (S6): inserts into board_events, in commit order, resuming
        after ``resume_token``, leaving out, in the store (S5), the inserts of the ``exclude``
        tenants (those other replicas own); and every write to trigger_subscriptions, as a
        ``Change`` with ``subscriptions`` set (their cache starts over). Once the stream is
        established (every change committed after this point is delivered) it yields
        ``Change("", 0, token)`` at once; a quiet stretch yields such a change at least every
        second or so, with a token past everything the stream has scanned. ``pace`` is awaited
        before every read that waits for new changes (a getMore, once the changes already
        received are handed out): the caller holds the stream back while it is busy with what
        it knows (S6). Raises ``ChangeStreamLost`` when the token cannot be resumed,
        ``StoreUnavailable`` on a transient error."""
        ...

    async def history_start(self) -> float | None:
        """Epoch seconds of the oldest change the feed can still resume after, from the server's
        own figures (Mongo: the first ``local.oplog.rs`` entry's wall time); None when the server
        will not say (no permission on ``local``, not a replica set). A2."""
        ...


class ResumeTokenStore(Protocol):
    async def load(self) -> Any | None: ...

    async def save(self, token: Any) -> None:
        """Persist the token, with the time it was saved (Mongo: the server's clock)."""
        ...

    async def clear(self) -> None: ...

    async def saved_at(self) -> float | None:
        """Epoch seconds the token was last saved (None: no token); a token's clusterTime is at
        most this, so the history headroom (A2) reads at most a save interval high."""
        ...
