"""What ``explain`` answers about one effect row, for an operator asking why it waits: the row's facts, its
timeline as the row and the event store record it, and what holds it now, each hold by name.

Plain values, encoded as they are by ``explain --json`` (``msgspec``): a field keeps its name and
meaning while ``EXPLAIN_SCHEMA`` stays 1 (new fields and new holds may be added). A hold is a
tagged struct: its ``hold`` field names it (``limit``, ``backoff``, ``ownership``...), the other
fields say what, who and until when. The engine decides them (``engine/upkeep/holds/``).
"""

from __future__ import annotations

from typing import Final

import msgspec

from board_outbox.model.records import LimitHolder

# bumped only when a field changes meaning or goes away
EXPLAIN_SCHEMA: Final = 1


class Moment(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded step of the row's life. ``at`` None: the row does not record when."""

    at: float | None
    what: str  # event | materialized | attempt_failed | lease_expired | attempt_parked |
    #            deferred | dead_lettered | replay (an audit action) | claimed | done
    attempt: int | None = None
    detail: str = ""


class _Hold(msgspec.Struct, frozen=True, kw_only=True, tag_field="hold"):
    summary: str  # one line for a person

    @property
    def name(self) -> str:
        return str(self.__struct_config__.tag)


class Done(_Hold, frozen=True, kw_only=True, tag="done"):
    """Nothing holds it: the effect ran (or was dropped, see ``outcome``)."""

    done_at: float | None
    outcome: str | None


class DeadLettered(_Hold, frozen=True, kw_only=True, tag="failed"):
    """Parked as failed: it waits for an operator's replay."""

    attempts: int
    error: str | None
    replay: str  # the command that returns it to pending


class Malformed(_Hold, frozen=True, kw_only=True, tag="malformed"):
    """The stored document does not decode (wrong-typed fields): the worker parks it when it
    claims it, or the stuck-row sweep does when no claim can pick it."""

    problem: str


class Lease(_Hold, frozen=True, kw_only=True, tag="lease"):
    """Claimed and running: a live lease."""

    claim_id: str | None
    attempt: int
    until: float


class ExpiredLease(_Hold, frozen=True, kw_only=True, tag="expired_lease"):
    """Claimed, but its lease ended: stealable; the next expired-lease sweep reclaims it."""

    claim_id: str | None
    attempt: int
    expired_at: float | None  # None: no lease recorded at all


class Paused(_Hold, frozen=True, kw_only=True, tag="paused"):
    """An operator's pause (F3) holds it: its tenant, its subscription or (a launch) its bot.
    It waits without spending an attempt and runs, in its order, once the pause is lifted.
    ``active`` False: the pause that held it is no longer on; a replica's next pause read
    releases the row."""

    scope: str  # tenant | subscription | bot
    key: str
    active: bool
    since: float | None  # when the pause went on (None: not on)
    by: str  # who paused it (or, lifted: who resumed it)
    reason: str = ""
    held: bool  # held already (its not_before set aside); False: the next claim holds it
    due: float | None = None  # a held row's own due time, given back on release


class Limit(_Hold, frozen=True, kw_only=True, tag="limit"):
    """A launch limit (F2): the key it is counted under, and that key's use now."""

    scope: str  # bot | tenant
    kind: str  # in_flight | per_second
    key: str
    limit: float | None  # slots, or launches per second; None: not configured any more
    used: int | None  # slots held, or launches counted this window; None: unknown
    full: bool  # over the limit now: the next claim defers it again
    holders: list[LimitHolder] = msgspec.field(default_factory=list)
    until: float | None = None  # when it is due again (its not_before, or the window's end)


class Backoff(_Hold, frozen=True, kw_only=True, tag="backoff"):
    """Pending after a failed attempt: due again at ``until``."""

    until: float
    after_attempt: int
    error: str | None


class NotDue(_Hold, frozen=True, kw_only=True, tag="not_due"):
    """Pending with a due time in the future and no error recorded (not a retry)."""

    until: float


class Coalesced(_Hold, frozen=True, kw_only=True, tag="coalesced"):
    """Superseded by a newer row of its (subscription, card). ``into`` may itself
    have been superseded since: ``chain`` follows ``coalesced_into`` from ``into`` to the row
    that runs for them all (its last entry), ``ran`` names it once it is done; ``problem`` says
    why the chain could not be followed to its end (a row gone or undecodable, a loop, more
    than ``CHAIN_LIMIT`` rows)."""

    into: str | None
    at: float | None
    chain: list[str] = msgspec.field(default_factory=list)
    end_state: str | None = None  # the state of the chain's last row (None: not read)
    ran: str | None = None  # the chain's last row, when it is done: the row that ran
    problem: str | None = None


class Coalescing(_Hold, frozen=True, kw_only=True, tag="coalescing"):
    """In its card's quiet window (coalescing): due at ``until``, when it launches unless a newer
    row of its (subscription, card) supersedes it; its burst began at ``burst_at``."""

    until: float
    burst_at: float


class Ownership(_Hold, frozen=True, kw_only=True, tag="ownership"):
    """Which live replica owns the row's tenant (S1): it claims the row first; another takes it
    once ``steal_at`` has passed. ``owner`` None: no replica is alive."""

    owner: str | None
    replicas: int
    steal_at: float | None = None


class Turn(_Hold, frozen=True, kw_only=True, tag="turn"):
    """Due, waiting its turn: ``ahead`` of the tenant's due rows fall due before it (counted up
    to a bound: ``ahead_at_least`` when it was reached)."""

    due_since: float
    ahead: int
    ahead_at_least: bool = False


Hold = Done | DeadLettered | Malformed | Lease | ExpiredLease | Limit | Backoff | NotDue | \
    Ownership | Turn | Coalesced | Coalescing | Paused


class RowFacts(msgspec.Struct, frozen=True, kw_only=True):
    """The row's own fields that bear on its wait (``dead-letters show`` prints the rest)."""

    tenant_id: str
    seq: int
    kind: str
    target: str | None  # the subscription (sub_id) or the projection
    state: str
    attempts: int
    max_attempts: int
    not_before: float
    claim_id: str | None
    lease_until: float | None
    waiting: str | None
    created_at: float
    updated_at: float
    priority: int = 0  # its subscription's when it was materialized (F1: orders rows within the tenant)


class Explanation(msgspec.Struct, frozen=True, kw_only=True):
    """``explain ROW_KEY``: ``holds`` in the order they were checked (``engine/upkeep/holds/checks.CHECKS``);
    ``row`` None when the stored document does not decode (``holds`` says why)."""

    schema: int
    row_key: str
    at: float  # when it was explained
    row: RowFacts | None
    holds: list[Hold]
    timeline: list[Moment]
    notes: list[str]  # what the store does not record, or could not say
