"""Ports: what the tail, the worker and the handlers need from the outside world.

Adapters live in ``board_outbox.adapters.memory`` (test twins, also the demo backend) and
``board_outbox.adapters.mongo`` (production, pymongo's async API). Both run the same contract suite.
Every method may raise ``StoreUnavailable`` for a transient failure.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from board_outbox.model.api_tokens import ApiToken
from board_outbox.model.domain import AuditEntry, Card, EffectRow, Subscription
from board_outbox.model.errors import MalformedDocument
from board_outbox.model.pause import Pause
from board_outbox.model.records import (
    AttentionPage,
    Change,
    Claim,
    ClaimTerms,
    ConsoleSession,
    DoneLatency,
    EventRecord,
    FailedPage,
    LaunchRequest,
    LimitHolder,
    Member,
    PushRecent,
    ReadModelVersions,
    ReadModelWrites,
    RowFilter,
    RowIdentity,
    RowSummary,
    TenantLag,
    UpsertIfNewer,
    UpsertResult,
)
from board_outbox.model.search import RowQuery
from board_outbox.model.series import SeriesPoint
from board_outbox.model.subscription_records import SubscriptionRecord
from board_outbox.model.transitions import Mark, Transition

__all__ = [
    "ApiTokenStore",
    "AttentionPage",
    "CardStore",
    "Change",
    "ChangeFeed",
    "Claim",
    "ClaimTerms",
    "ConsoleSession",
    "ConsumeOutcome",
    "CursorStore",
    "DoneLatency",
    "EffectOutbox",
    "EventLog",
    "EventRecord",
    "FailedPage",
    "LabelStore",
    "LaunchRequest",
    "Launcher",
    "LimitHolder",
    "LimitStore",
    "Mark",
    "Member",
    "MembershipStore",
    "Pause",
    "PauseStore",
    "PushRecent",
    "ReadModelOp",
    "ReadModelStore",
    "ReadModelVersionStore",
    "ReadModelVersions",
    "ReadModelWrites",
    "ResumeTokenStore",
    "RowFilter",
    "RowIdentity",
    "RowSummary",
    "SeriesPoint",
    "SeriesStore",
    "SessionStore",
    "StatusStore",
    "Stores",
    "SubscriptionAdmin",
    "SubscriptionRecord",
    "SubscriptionStore",
    "TenantLag",
    "UpsertIfNewer",
    "UpsertResult",
]


class EventLog(Protocol):
    async def allocate_seq(self, tenant_id: str) -> int:
        """Reserve the tenant's next seq ($inc on a counter). The insert comes later, or never."""
        ...

    async def insert(self, doc: Mapping[str, Any]) -> None:
        """Insert an event document carrying an allocated seq."""
        ...

    async def read_after(self, tenant_id: str, after_seq: int, limit: int) -> list[EventRecord]:
        """Up to ``limit`` inserted events with seq > after_seq, in seq order: the first
        ``limit`` of them, or (a backend reading a bounded seq window) those of the next
        ``limit`` seqs when any is there. Fewer than ``limit`` does not mean the log ends:
        only an empty answer does."""
        ...

    async def max_inserted_seq(self, tenant_id: str) -> int:
        """The highest seq actually inserted (0 if none) -- NOT the allocator counter."""
        ...

    async def allocated_seq(self, tenant_id: str) -> int:
        """The allocator counter (for lag metrics)."""
        ...

    async def seq_before(self, tenant_id: str, epoch: float) -> int:
        """The highest inserted seq whose event was written at or before ``epoch``
        (``model.epoch.written_before``; 0 if none): read from the top seq down, stopping at the
        first such event."""
        ...

    async def tenants(self) -> set[str]:
        """Tenants that have allocated at least one seq."""
        ...

    async def heads(self) -> dict[str, int]:
        """Every tenant's allocator counter, in one round trip (the O(1) poll net, S2)."""
        ...


class CursorStore(Protocol):
    async def get(self, tenant_id: str) -> int | None: ...

    async def epoch(self, now: float) -> float:
        """The store-wide epoch (``model/epoch.py``): written once at ``now`` ($setOnInsert) by
        the first caller, then returned as stored. Never a tenant's cursor (``all`` leaves it
        out)."""
        ...

    async def seed(self, tenant_id: str, value: int) -> int:
        """Create the cursor at ``value`` unless it exists; return the cursor's value."""
        ...

    async def compare_and_set(self, tenant_id: str, expected: int, new: int) -> bool:
        """Advance from ``expected`` to ``new``; False if another replica moved it first."""
        ...

    async def all(self) -> dict[str, int]:
        """Every tenant's cursor, in one round trip (the O(1) poll net, S2). A cursor document
        that does not parse is left out and reported (``BAD_DOCUMENTS``)."""
        ...

    async def seed_many(self, values: Mapping[str, int]) -> None:
        """``seed`` for many tenants in one bulk write (new tenants cost no round trip each)."""
        ...

    async def put(self, tenant_id: str, value: int) -> None:
        """Set the cursor unconditionally (and lift a hold): the operator's ``cursor reset``."""
        ...

    async def hold(self, tenant_id: str, cursor: int, counter: int) -> None:
        """Record on the cursor that it was found ahead of its counter (R2): the tenant stays
        held across restarts, even once the counter has caught up, until the cursor moves by
        ``compare_and_set`` or ``put`` (both lift the hold)."""
        ...

    async def holds(self, tenants: Collection[str] | None = None
                    ) -> dict[str, tuple[int, int]]:
        """Held tenants -> (cursor, counter when found), in one query (``tenants``: among
        those only, read by id)."""
        ...








class EffectOutbox(Protocol):
    async def upsert_rows(
        self, rows: Sequence[EffectRow], *, claim: ClaimTerms | None = None
    ) -> UpsertResult:
        """Insert the rows whose ``row_key`` is not stored yet, in one unordered bulk write (a
        duplicate key means the row exists: racing replicas collapse on it, and the stored row
        is left as it is). With ``claim`` the rows it inserts are born claimed under it (the
        ``claim`` transition applied before the write: the tail's hand-off to its own worker)
        and come back as ``UpsertResult.claims``; without, they are born pending. A row not due
        yet (``domain.born_due``: a coalescing row in its quiet time) is always born pending."""
        ...

    async def claim_any(
        self, now: float, lease_seconds: float, limit: int, *,
        prefer: Collection[str] | None = None, steal_before: float | None = None,
        tenants: Collection[str] | None = None,
    ) -> list[Claim]:
        """Claim up to ``limit`` due pending rows (not_before <= now) across every tenant in a
        constant number of round trips (one pick, two under a backlog; one findAndModify for a
        single row, else update_many + read back), round-robin by tenant, each tenant's rows
        oldest due first (F1, ``model/fairness.py``). With ``prefer``, rows of those tenants go
        first and another tenant's row is taken only if it was materialized (``created_at``) by
        ``steal_before`` (its owner had its chance). ``tenants`` limits the claim to those
        tenants (None: every tenant)."""
        ...

    async def reclaim_expired(
        self, now: float, lease_seconds: float, limit: int, *,
        tenants: Collection[str] | None = None,
    ) -> list[Claim]:
        """Claimed rows whose lease expired, across tenants (or only ``tenants``): one query finds
        them, each is reclaimed atomically (``attempts`` +1, ``reclaimed``)."""
        ...

    async def apply_claimed(self, ref: Any, claim_id: str, t: Transition) -> bool:
        """Apply a transition (``model/transitions.py``) to a row this claim holds, fenced on
        ``{ref, state: claimed, claim_id}`` (M8): False, and nothing written, when the lease was
        stolen. Raises ``StoreError`` when the document refuses it ($inc on a non-number, $push
        onto a non-array), and then nothing is written."""
        ...

    async def apply_claimed_many(self, refs: Sequence[Any], claim_id: str, t: Transition) -> list[Any]:
        """``apply_claimed`` on several rows of one claim, in as few writes as the store allows
        (Mongo: one ``update_many`` fenced on ``{_id in refs, state: claimed, claim_id}``);
        returns the refs it moved (a row whose lease was stolen is left alone)."""
        ...

    async def apply_marks(self, marks: Sequence[Mark]) -> list[Any]:
        """Several fenced transitions in one write (the completer's flush: River's batch
        completer): each mark moves its row only while its claim holds it. Returns the refs
        moved. Mongo: one unordered ``bulk_write`` (an ``update_many`` per group of marks that
        share a claim and a transition, an ``update_one`` per other mark), and one read back
        only when fewer rows moved than were marked (a stolen lease, or a retry after a write
        that had landed). Raises ``StoreError`` when a row refuses its transition: nothing is
        known of the others then (the caller applies them one by one)."""
        ...

    async def apply_failed(self, row_key: str, t: Transition, *,
                           updated_at: float | None = None) -> bool:
        """Apply a transition to a dead-letter (``{row_key, state: failed}``, e.g. ``replay``),
        and only while its ``updated_at`` is still the one given (a bulk replay's fence: a row
        replayed by someone else, or parked again, since it was read is left as it is); False:
        no such failed row. Raises ``StoreError`` when the document refuses it."""
        ...

    async def failed_page(self, flt: RowFilter, after: Any = None) -> FailedPage:
        """One page of the dead-letters matching ``flt`` (its ``limit`` documents at most; its
        ``states`` are ignored: failed rows only), oldest parked first, in ``(updated_at,
        row_key)`` order, after the position ``after`` a previous page returned. Mongo: one
        query over the failed rows' partial index, whose key gives that order: no sort stage
        and no skip, whatever the number of dead-letters. A document whose ``updated_at`` is not
        a number or whose ``row_key`` is not a string is not a dead-letter any walk can name (as
        ``find``); one that does not decode is named in ``unreadable``."""
        ...

    async def park_broken(
        self, ref: Any, now: float, error: str, *, claim_id: str | None = None
    ) -> bool:
        """Park a row whose document broke a transition or can never be claimed (R1): one
        ``$set`` of a clean failed state (``validation.park_fields``: bad fields replaced, the
        error appended), fenced on ``claim_id`` when given. False: no such row (or claim)."""
        ...

    async def stuck_rows(
        self, now: float, limit: int, horizon: float = ...
    ) -> list[tuple[Any, dict[str, Any]]]:
        """Live-looking rows no claim can ever pick (``validation.stuck_reason``): a state
        outside the enum, a non-string tenant, a non-numeric not_before or lease_until, a lease
        beyond ``horizon`` seconds, a pending row due beyond ``times.due_limit(now)`` (R7).
        (ref, raw document) pairs."""
        ...

    async def get(self, row_key: str) -> EffectRow | None: ...

    async def find(self, flt: RowFilter) -> list[EffectRow]: ...

    async def count_by_state(
        self, tenant_id: str | None = None, *, states: Collection[str] | None = None
    ) -> dict[str, int]:
        """Rows by state (of one tenant when given). ``states``: count only those (Mongo: one
        count each over that state's partial index, whatever the history holds)."""
        ...

    async def live_tenants(self) -> set[str]:
        """Tenants holding pending or claimed rows."""
        ...

    async def oldest_live_created_at(self, tenant_id: str) -> float | None:
        """``created_at`` of the tenant's oldest pending or claimed row (None: none); O1/O3."""
        ...

    async def purge(self, flt: RowFilter) -> int:
        """Delete failed rows matching the filter (other states are never purged)."""
        ...

    async def release_held(self, now: float, keep: Collection[str]) -> int:
        """Issue 33: every row a pause holds (pending, ``not_before`` at or past
        ``model/pause.HELD_OFFSET``, ``waiting`` a string) whose ``waiting`` is not in ``keep``
        (the pauses still on) is due again at its own time: ``not_before`` back by the offset,
        ``waiting`` cleared, attempts untouched. One write (Mongo: one ``update_many`` whose
        bounds on the pending index hold the held rows only); returns how many moved."""
        ...

    # --- read-only: the completeness audit, the replays and the latency summary (A1, A4, A5)

    async def rows_between(self, tenant_id: str, after_seq: int, upto_seq: int) -> list[RowIdentity]:
        """The tenant's rows with ``after_seq < seq <= upto_seq``, by seq, in one query (Mongo:
        the ``tenant_seq`` index); a document without a usable row key or seq is left out."""
        ...

    async def existing_keys(self, row_keys: Collection[str]) -> set[str]:
        """Which of ``row_keys`` are stored, in one query (only the keys come back)."""
        ...

    async def done_latencies(self, since: float, limit: int) -> list[DoneLatency]:
        """Event insert -> done of the ``limit`` newest rows done at or after ``since``, across
        every tenant, in one query; rows that do not say (no event time) are left out."""
        ...

    async def due_ahead(self, tenant_id: str, not_before: float, seq: int, limit: int) -> int:
        """How many of the tenant's pending rows fall due before ``not_before``, or at it for an
        earlier seq (the rows of one batch share their due time), counted up to ``limit``: about
        the rows a claim takes ahead of that one (``explain``; Mongo: one count over
        ``pending_tenant_not_before``, stopped at ``limit``)."""
        ...

    # --- coalescing (issue 33) ------------------------------------------------------------------

    async def newest_in_burst(self, tenant_id: str, sub_id: str, card_id: str,
                              after_seq: int) -> RowIdentity | None:
        """The newest coalescing row (one born with ``burst_at``) of (tenant, subscription,
        card) with ``seq > after_seq`` that is pending, claimed or done (None: none). Mongo: one
        query over the partial ``burst_sub_card_seq`` index, newest first, one document."""
        ...

    async def covered_in_burst(self, tenant_id: str, sub_id: str, card_id: str,
                              after_seq: int) -> RowIdentity | None:
        """The oldest coalescing row of (tenant, subscription, card) with ``seq > after_seq``
        that covers an older row's edit: done (it ran, with a newer snapshot), or pending or
        claimed with its burst closed (``burst_closed``: it launches whatever is newer). None:
        none. Mongo: one query over ``burst_sub_card_seq``, oldest first, one document."""
        ...

    async def carry_burst(self, row_key: str, *, burst_at: float, due_by: float, now: float,
                          close: bool = False) -> bool:
        """Hand a superseded row's burst to the pending row ``row_key`` that supersedes it:
        its ``burst_at`` lowered to ``burst_at`` and its ``not_before`` to ``due_by`` (``$min``
        both), and its burst closed when ``close``; fenced on the row still being pending.
        False: it is not (claimed, done...)."""
        ...

    async def restart_burst(self, tenant_id: str, sub_id: str, card_id: str, after_seq: int,
                            *, at: float) -> int:
        """A row of (tenant, subscription, card) launches at its burst's deadline: the newer
        pending or claimed coalescing rows begin the next burst at ``at`` (``burst_at`` raised to it,
        ``$max``); how many. Mongo: one ``update_many`` over ``burst_sub_card_seq``."""
        ...

    # --- operators' bulk actions (A8) -----------------------------------------------------------

    async def state_page(self, flt: RowFilter, after: Any = None) -> FailedPage:
        """As ``failed_page``, for the rows of ``flt.states[0]`` (pending: a bulk cancel's walk;
        done: a rerun's): one page in the adapter's walk order after ``after``, ``updated_at``
        bounded as ``flt`` says. Mongo: pending rows over ``pending_updated_at_row_key``
        (``(updated_at, row_key)`` order, as the dead-letters); done rows, the bulk of the
        history, in ``_id`` order (the walk reads the collection once, with no index to keep)."""
        ...

    async def apply_unclaimed(self, row_key: str, t: Transition, *, state: str,
                              updated_at: float) -> bool:
        """Apply ``t`` to the row ``row_key`` only while it is in ``state`` with the
        ``updated_at`` it was read with (a bulk cancel's fence: a row a replica claimed, or that
        changed in any way, since it was read is left as it is); False: not so. Raises
        ``StoreError`` when the document refuses it."""
        ...

    async def search(self, q: RowQuery) -> list[EffectRow]:
        """The rows ``q`` asks for, newest first, at most ``q.limit``: one query over an index
        per form (Mongo: ``tenant_card_seq``, ``tenant_seq``, ``row_key_unique``, a state's
        partial index). A document that does not decode is left out and reported through
        ``domain.unreadable``."""
        ...


class SubscriptionStore(Protocol):
    async def get(self, sub_id: str) -> Subscription:
        """Raises ``SubscriptionNotFound`` (definitive) or ``StoreUnavailable`` (transient)."""
        ...

    async def list_for_tenant(self, tenant_id: str) -> list[Subscription]: ...

    async def get_many(self, sub_ids: Collection[str]) -> dict[str, Subscription]:
        """One round trip for a claimed batch; an id missing from the result is deleted (or
        malformed, which ``get`` would report)."""
        ...

    async def tenants(self) -> set[str]:
        """Tenants with at least one enabled subscription."""
        ...

    async def put(self, sub: Subscription) -> None: ...

    async def delete(self, sub_id: str) -> None: ...


class CardStore(Protocol):
    async def get(self, tenant_id: str, card_id: str) -> Card:
        """Raises ``CardNotFound`` (definitive), ``MalformedCard`` or ``StoreUnavailable``."""
        ...

    async def get_many(
        self, tenant_id: str, card_ids: Collection[str]
    ) -> dict[str, Card | MalformedDocument]:
        """One round trip for a batch: found cards (or the decode error of a malformed one);
        a card id missing from the result is definitively deleted."""
        ...

    async def put(self, card: Card) -> None: ...

    async def delete(self, tenant_id: str, card_id: str) -> None: ...


class LabelStore(Protocol):
    async def consume(
        self, tenant_id: str, card_id: str, labels: Sequence[str], by: str
    ) -> ConsumeOutcome:
        """Spend a one-shot: atomically remove ``labels`` from the card iff it carries all of
        them, recording on the card that row ``by`` spent them (same write). Idempotent per row:
        ``"consumed"`` now; ``"already"`` -- spent earlier by this same row (a retry after a crash
        or a lost lease: launch, do not consume again); ``"absent"`` -- not there and not spent by
        this row (skip). Raises ``CardNotFound``."""
        ...

    async def forget_consumed(self, tenant_id: str, card_id: str, by: str) -> None:
        """Drop row ``by``'s entry from the card's ``consumed`` record. Called once the row's
        ``consume_marked`` is durable: from then on no retry of it asks ``consume`` again, so the
        entry is dead weight. (The record is also capped at ``CONSUMED_CAP`` newest entries.)"""
        ...


ConsumeOutcome = Literal["consumed", "already", "absent"]




class Launcher(Protocol):
    async def launch(self, req: LaunchRequest) -> str:
        """Start the bot; return a launch id. Raises ``LaunchFailed`` (retried)."""
        ...




class SubscriptionAdmin(Protocol):
    """The operators' reads and writes of the subscriptions (P6): each write carries its audit
    entry in the same atomic write, and is conditional on the revision the operator read (two
    operators editing at once: the second is told, nothing is lost). The service reads through
    ``SubscriptionStore``; these writes reach it like any other change of the collection."""

    async def records(self, tenant_id: str | None = None,
                      limit: int = 1000) -> list[SubscriptionRecord]:
        """The subscription documents (of ``tenant_id``; all when None), by id, at most
        ``limit``: each parsed on its own, one that does not decode named with its problem."""
        ...

    async def record(self, sub_id: str) -> SubscriptionRecord | None:
        """The document of ``sub_id`` (None: there is none), parsed as in ``records``."""
        ...

    async def create(self, sub: Subscription, entry: AuditEntry) -> bool:
        """Insert ``sub`` (revision 1) with ``entry`` as its audit. False, nothing written: a
        document with its id exists."""
        ...

    async def update(self, sub: Subscription, entry: AuditEntry, rev: int,
                     ref: object = None) -> bool:
        """Set every field of ``sub`` and append ``entry`` to the audit (its newest
        ``AUDIT_KEEP`` kept), revision + 1, only if the stored revision is still ``rev``
        (``ref``: the record's ``ref``, the document's own ``_id``). False, nothing written:
        changed (or removed) since it was read."""
        ...

    async def remove(self, sub_id: str, rev: int, ref: object = None) -> bool:
        """Delete the document of ``sub_id`` if its revision is still ``rev`` (False: changed
        or gone since it was read)."""
        ...


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






ReadModelOp = UpsertIfNewer | PushRecent


class ReadModelStore(Protocol):
    """Documents of projection read models, keyed (model, tenant, key), guarded by seq so that
    applying an older or repeated event is a no-op (projection rows run in any order)."""

    async def upsert_if_newer(
        self, model: str, tenant_id: str, key: str, seq: int, doc: Mapping[str, Any]
    ) -> bool: ...

    async def write_many(
        self, model: str, tenant_id: str, ops: Sequence[ReadModelOp]
    ) -> list[bool]:
        """Apply a batch of writes in one bulk write (Mongo: one unordered ``bulk_write``); for
        each op, True if it changed the model, False if it was stale or already applied."""
        ...

    async def write_groups(self, groups: Sequence[ReadModelWrites]) -> list[list[bool]]:
        """``write_many`` for several (model, tenant) read models at once, in one bulk write
        (Mongo: one unordered ``bulk_write`` for every group's ops): a claimed batch's rows of
        one projection across tenants. Per group, per op, what ``write_many`` says."""
        ...

    async def get(self, model: str, tenant_id: str, key: str) -> dict[str, Any] | None: ...

    async def list(self, model: str, tenant_id: str) -> list[dict[str, Any]]: ...

    async def reset(self, model: str, tenant_id: str) -> int: ...




class ReadModelVersionStore(Protocol):
    """One small document per (model, tenant) read model: the generation pointer a shadow rebuild
    (B3) flips in one compare-and-set."""

    async def get(self, model: str, tenant_id: str) -> ReadModelVersions: ...

    async def all(self) -> dict[tuple[str, str], ReadModelVersions]:
        """Every pointer, keyed (model, tenant), in one query (only read models that were ever
        shadow-rebuilt have one): what a replica caches."""
        ...

    async def compare_and_set(self, model: str, tenant_id: str, expected: ReadModelVersions,
                              new: ReadModelVersions) -> bool:
        """Replace the pointer by ``new`` only if it still equals ``expected`` (a missing
        document equals the default ``ReadModelVersions()``)."""
        ...


@dataclass
class Stores:
    """One backend's adapters for every port (what an adapter package's factory returns)."""

    events: EventLog
    cursors: CursorStore
    outbox: EffectOutbox
    subs: SubscriptionStore
    cards: CardStore
    labels: LabelStore
    launcher: Launcher
    readmodels: ReadModelStore
    feed: ChangeFeed | None = None
    tokens: ResumeTokenStore | None = None
    members: MembershipStore | None = None
    rm_versions: ReadModelVersionStore | None = None
    status: StatusStore | None = None
    limits: LimitStore | None = None
    sessions: SessionStore | None = None
    pauses: PauseStore | None = None
    series: SeriesStore | None = None  # the console's charts (issue 33)
    # the operators' subscription management (P6; None: this backend offers none)
    sub_admin: SubscriptionAdmin | None = None
    # the JSON API's bearer tokens (A8; None: this backend offers none)
    api_tokens: ApiTokenStore | None = None




class LimitStore(Protocol):
    """Concurrency and rate limits shared by every replica (F2). Each call is atomic on one
    document, no transaction: a limit holds across processes, not per process."""

    async def acquire(self, key: str, limit: int, holder: str, until: float, now: float) -> bool:
        """Take one of ``limit`` in-flight slots of ``key`` for ``holder`` until ``until`` (a
        slot whose ``until`` is at or before ``now`` is free again: its holder died). True
        also when ``holder`` holds one already. False: all ``limit`` are held."""
        ...

    async def renew(self, key: str, holder: str, until: float) -> bool:
        """Push the end of the slot ``holder`` holds of ``key`` to ``until`` (its launch runs
        on). Fenced on the holder: False, nothing written, when ``holder`` holds no slot of
        ``key`` (released, or taken over by another holder after its end)."""
        ...

    async def release(self, key: str, holder: str) -> None:
        """Free the slot ``holder`` holds of ``key`` (none held: nothing happens)."""
        ...

    async def take(self, key: str, per_second: float, now: float) -> bool:
        """Count one launch of ``key`` at ``now`` against ``per_second`` (``model/limits``
        windows). False: the window is full, nothing counted."""
        ...

    # --- read-only: what ``explain`` shows of a limit (issue 33)

    async def holders(self, key: str, now: float) -> list[LimitHolder]:
        """The in-flight slots of ``key`` held at ``now`` (``until`` after it), by holder, in one
        read (Mongo: the ``key_holder`` index). A slot document no launch can have written
        (``validation.slot_problem``) is left out and reported: it is free to take over."""
        ...

    async def counted(self, key: str, per_second: float, now: float) -> int | None:
        """The launches of ``key`` counted in the ``per_second`` window holding ``now`` (0: none
        yet), one read by id. None: the counter is not a count (its window stays shut)."""
        ...

    async def upkeep(self) -> list[str]:
        """Re-create the store's indexes when they are gone (its collection dropped while the
        service runs: without the TTL index, slots and counters would pile up); the names
        created. One index listing when they are there: a periodic pass calls it, never a
        launch."""
        ...


class PauseStore(Protocol):
    """The operators' pauses (issue 33), one small document per (scope, key), read whole by
    every replica once per heartbeat. Each call is atomic on one document."""

    async def pause(self, scope: str, key: str, *, reason: str, by: str, at: float) -> bool:
        """Pause (``scope``, ``key``), or update the reason of a pause that is on; an audit entry
        is appended either way (the newest ``AUDIT_KEEP`` are kept). True when it was not
        paused before. A stored document that does not parse is written whole again."""
        ...

    async def resume(self, scope: str, key: str, *, by: str, at: float) -> bool:
        """Lift the pause (the document stays, ``active`` false, for its audit), an audit entry
        appended. False, and nothing written, when it is not paused."""
        ...

    async def all(self) -> list[Pause]:
        """Every pause document, on or lifted, in one read, each parsed on its own
        (``model/pause.parse_pause``): one that does not parse is left out and reported once,
        and the others stand."""
        ...


class SessionStore(Protocol):
    """The console's logged-in sessions (issue 30), shared by every replica's console: a login
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
    """``trigger_series``: the small rolling series the console charts (issue 33): one document
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


class MembershipStore(Protocol):
    """Replicas' heartbeats (S1): a lease per member. Only a hint for sharing work: the cursor
    CAS and the fenced claims stay the only correctness mechanism."""

    async def heartbeat(self, member_id: str, now: float, ttl_seconds: float) -> list[Member]:
        """Renew this member's lease; return the live members (expires_at > now), this one
        included."""
        ...

    async def heartbeat_with_pauses(self, member_id: str, now: float, ttl_seconds: float,
                                    ) -> tuple[list[Member], list[Pause]]:
        """``heartbeat`` whose read of the members reads the pauses too (F3), in the same
        round trip: the pauses ride the heartbeat (S6). Each pause document parsed alone, as
        ``PauseStore.all`` parses them; a backend without pauses returns none."""
        ...

    async def leave(self, member_id: str) -> None: ...

    async def live(self, now: float) -> list[Member]:
        """The live members (expires_at > now), by member_id, without renewing anyone (for
        ``status``: the replicas alive)."""
        ...
