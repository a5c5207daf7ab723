"""What the operators' views read and keep: the console's sessions, the charts' series and
the per-tenant status figures, and the JSON API's tokens."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

from board_outbox.model.api_tokens import ApiToken
from board_outbox.model.records import AttentionPage, ConsoleSession, RowSummary
from board_outbox.model.series import SeriesPoint

__all__ = ["ApiTokenStore", "SeriesStore", "SessionStore", "StatusStore"]


class SessionStore(Protocol):
    """The console's logged-in sessions, shared by every replica's console: a login
    opens one, a logout closes it, and a cookie naming a closed or expired one is not admin."""

    async def open(self, session: ConsoleSession) -> None:
        """Store ``session`` (its ``session_id`` is unique: a random id's hash)."""
        ...

    async def get(self, session_id: str, now: float) -> ConsoleSession | None:
        """The session, while it is open and ``expires_at`` is after ``now``; None otherwise
        (never opened, closed, expired, or a stored document that does not parse)."""
        ...

    async def close(self, session_id: str) -> None:
        """End the session (none: nothing happens)."""
        ...


class ApiTokenStore(Protocol):
    """The JSON API's bearer tokens (A8): stored hashed, revocable, kept after revocation."""

    async def create(self, token: ApiToken) -> None: ...

    async def get(self, token_id: str) -> ApiToken | None:
        """The token of that id (None: none, or its document does not decode: it authorizes
        nothing, and is reported once)."""
        ...

    async def all(self) -> list[ApiToken]:
        """Every token, revoked ones too, oldest first."""
        ...

    async def revoke(self, token_id: str, at: float, by: str) -> bool:
        """Revoke it (False: no such token, or revoked already)."""
        ...


class SeriesStore(Protocol):
    """``trigger_series``: the small rolling series the console charts: one document
    per (minute, replica), written at most once a minute by each replica, kept for a few hours
    (``expire_at``: a TTL index)."""

    async def flush(self, point: SeriesPoint, expire_at: float) -> None:
        """One upsert of ``point`` keyed (minute, replica), kept until ``expire_at`` (epoch
        seconds). Idempotent: the stored counts become the larger of theirs and the point's,
        the stored base the smaller; the lag figures are the point's."""
        ...

    async def read(self, since: int, until: int, tenants: Collection[str] | None = None,
                   limit: int = ...) -> list[SeriesPoint]:
        """The points with ``since <= minute < until``, oldest first, in one query over the
        ``minute`` index: the newest ``limit`` when more are stored. Each point's lag lists only
        the ``tenants`` given (None: every tenant it lists; empty: none). A document that does not
        parse is left out and reported (``BAD_DOCUMENTS``)."""
        ...


class StatusStore(Protocol):
    """The per-tenant figures of ``status`` and ``/metrics`` for every tenant at once (O1-O3): a
    constant number of queries per refresh, whatever the tenant count."""

    async def row_summary(self, tenants: Collection[str] | None = None,
                          states: Collection[str] | None = None) -> dict[str, RowSummary]:
        """Rows by state and the oldest live row's ``created_at``, per tenant (one aggregate;
        ``tenants``: only theirs, read through the tenant index; ``states``: only the rows in
        those states -- the service's periodic refresh asks for the live ones and the
        dead-letters: their cost is those rows, not the week of done history)."""
        ...

    async def next_event_at(self, after: Mapping[str, int]) -> dict[str, float]:
        """For each tenant of ``after`` (tenant -> cursor), the ``at`` of its first event past
        the cursor, when one is inserted: one indexed read per tenant (a handful at a time),
        so callers bound ``after`` (``service.health.NextEvents``)."""
        ...

    async def attention(self, offset: int, limit: int) -> AttentionPage:
        """The tenants behind (counter ahead of cursor) or holding dead-letters, most behind
        first, then most dead-letters, then by id: ``limit`` of them from ``offset``, sorted and
        cut in the store, with totals over every tenant (one aggregate; the console's overview).
        A counter or cursor whose seq is not a number counts as absent here, and a tenant whose
        figures are not integers is left off the page."""
        ...
