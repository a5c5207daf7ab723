"""The effect outbox: rows materialized from events, claimed, run and marked (the fenced
transitions), and the reads over them."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol

from board_outbox.model.records import Claim, ClaimTerms, UpsertResult
from board_outbox.model.rows import EffectRow
from board_outbox.model.search import RowQuery
from board_outbox.model.transitions import Mark, Transition

# isort: split
# what the reads take and answer (dead-letter pages, the audit, the replays, explain)
from board_outbox.model.records import DoneLatency, FailedPage, RowFilter, RowIdentity

__all__ = ["EffectOutbox"]


class EffectOutbox(Protocol):
    async def upsert_rows(
        self, rows: Sequence[EffectRow], *, claim: ClaimTerms | None = None
    ) -> UpsertResult:
        """Insert the rows whose ``row_key`` is not stored yet, in one unordered bulk write (a
        duplicate key means the row exists: racing replicas collapse on it, and the stored row
        is left as it is). With ``claim`` the rows it inserts are born claimed under it (the
        ``claim`` transition applied before the write: the tail's hand-off to its own worker)
        and come back as ``UpsertResult.claims``; without, they are born pending. A row not due
        yet (``rows.born_due``: a coalescing row in its quiet time) is always born pending."""
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
        """F3: every row a pause holds (pending, ``not_before`` at or past
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

    # --- coalescing: a burst of edits launches once --------------------------------------------

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
        ``codec.unreadable``."""
        ...
