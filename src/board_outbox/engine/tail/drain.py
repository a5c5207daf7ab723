"""The tail's leaf types: its settings, what one batch did (``DrainResult``), where its rows go
(``Handoff``) and the head-of-line poison count; in their own module so the configuration and
the service import them without the tail."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import msgspec

from board_outbox.model.bounds import Pos, PosInt
from board_outbox.ports import Claim, ClaimTerms


class TailSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The tail's settings; the ``[tail]`` configuration section decodes straight into it."""

    batch_size: PosInt = 500
    # F1: a batch is cut down so that it takes about this long at the measured pace (never
    # below MIN_FAIR_BATCH events): on a slow store, one tenant's backlog then holds up the
    # other tenants' events by this long per round, not by a whole batch_size batch
    batch_seconds: Pos = 0.25
    poll_interval_seconds: Pos = 1.0
    # the poll net's interval while the change stream is open (never below
    # poll_interval_seconds, never above half of stall_seconds): the stream wakes, the poll is
    # only the net (C1); poll_interval_seconds again as soon as the stream closes (S6)
    stream_poll_interval_seconds: Pos = 10.0
    # S6: while the tail is busy, the stream's next getMore waits for its next pass, at most
    # this long: what a quiet tenant's wake may wait behind a busy one at most, and the most a
    # subscription change reaches the cache late on a busy replica
    stream_pace_seconds: Pos = 0.1
    young_gap_seconds: Pos = 30.0
    poison_ticks: PosInt = 20
    seed: Literal["latest", "earliest"] = "latest"
    change_streams: bool = True
    # the stream's resume token is persisted at most this often (and on shutdown), never per event
    token_save_seconds: Pos = 5.0
    # behind, and the cursor has not moved for this long: the tenant is stalled (O2)
    stall_seconds: Pos = 120.0


MIN_FAIR_BATCH = 50


class Handoff(Protocol):
    """Where the tail's rows go when a worker runs beside it (the service's own worker): the
    rows it inserts are born claimed for that worker, and a tenant is materialized only as far
    as the worker has room for (backpressure: a backlog waits in the event log, read by the
    cursor, not as pending rows every claim would have to look past)."""

    def room(self, tenant_id: str) -> int:
        """How many rows of this tenant the worker takes now (0: none; the tenant waits)."""
        ...

    def terms(self) -> ClaimTerms | None:
        """The claim the next insert's rows are born under (None: born pending, e.g. while the
        worker stops)."""
        ...

    def receive(self, claims: Sequence[Claim]) -> None:
        """The rows an insert wrote born claimed: the worker's to run."""
        ...


class DrainResult(msgspec.Struct, kw_only=True):
    tenant_id: str
    limit: int = 0  # the batch size asked for
    cursor_before: int = 0
    cursor_after: int = 0
    read: int = 0
    materialized: int = 0  # events whose rows are durable (matched or not)
    rows: int = 0
    rows_inserted: int = 0
    skipped_deleted: int = 0
    skipped_poison: int = 0
    stepped_gaps: int = 0
    unhandled: int = 0  # rows of a kind no handler is registered for (written; they dead-letter)
    streamed: int = 0  # events taken from the change stream's documents instead of a read
    # the rows this batch inserted born claimed for this replica's worker (``Handoff``)
    claims: tuple[Claim, ...] = ()
    # "" | young_gap | poison | aborted | cas_lost | stalled | beyond_counter | cursor_ahead |
    # no_room (the worker has no room for this tenant's rows yet: nothing read)
    stopped: str = ""
    error: str = ""

    @property
    def full(self) -> bool:
        """More events may be waiting right behind this batch."""
        return self.stopped == "" and self.read > 0


class Figures(msgspec.Struct, frozen=True, kw_only=True):
    """Every tenant's counter and cursor as one poll net read them, at ``at`` (clock time)."""

    heads: dict[str, int]
    cursors: dict[str, int]
    at: float

    def lag(self, tenant_id: str) -> int:
        return max(0, self.heads.get(tenant_id, 0) - self.cursors.get(tenant_id, 0))


class PoisonTracker:
    """Consecutive ticks that the same head-of-line seq stayed unreadable."""

    def __init__(self) -> None:
        self._ticks: dict[str, tuple[int, int]] = {}  # tenant -> (seq, ticks)

    def bump(self, tenant_id: str, seq: int) -> int:
        prev_seq, ticks = self._ticks.get(tenant_id, (seq, 0))
        ticks = ticks + 1 if prev_seq == seq else 1
        self._ticks[tenant_id] = (seq, ticks)
        return ticks

    def clear(self, tenant_id: str) -> None:
        self._ticks.pop(tenant_id, None)
