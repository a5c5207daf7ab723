"""The board's documents: an event, a card, and the snapshot of both that a row carries.

The board writes these; the service only reads them. Separate from the rows: an event is what
happened, a row is an effect owed for it.
"""

from __future__ import annotations

import logging
from typing import Final

import msgspec

from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.times import TIME_MAX, TIME_MIN, time_problem

# the newest entries a card's ``consumed`` record keeps (a backstop: entries are dropped as soon as
# their row's consume_marked is durable, so only rows that died in between can pile up)
CONSUMED_CAP = 64
EVENTS_COLLECTION: Final = "board_events"


class BoardEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``board_events``. ``seq`` is allocated per tenant before the insert.

    ``at``: when the board wrote it, epoch seconds (0: the board gave no time). It is the
    board's, and only read (latency, the audit's age, ``explain``): one outside the stored-time
    range (R7, a millisecond timestamp...) is read as no time and reported once as a bad
    document -- the event itself still runs (its effects are owed whatever its clock said)."""

    tenant_id: str
    seq: int
    type: str  # card.created | card.updated | card.moved | card.labeled | card.deleted | ...
    card_id: str
    at: float = 0.0
    actor: str | None = None

    def __post_init__(self) -> None:
        if not TIME_MIN <= self.at <= TIME_MAX:  # NaN too
            BAD_DOCUMENTS.report(EVENTS_COLLECTION, f"{self.tenant_id}/{self.seq}",
                                 f"{time_problem('at', self.at)}: read as no time (the event "
                                 "runs)", level=logging.WARNING)
            msgspec.structs.force_setattr(self, "at", 0.0)


class Card(msgspec.Struct, frozen=True, kw_only=True):
    tenant_id: str
    card_id: str
    title: str = ""
    column: str = ""
    labels: tuple[str, ...] = ()


class EventSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A normalized event: the event plus the card as it was when the event was materialized."""

    seq: int
    type: str
    card_id: str
    at: float = 0.0
    title: str = ""
    column: str = ""
    labels: tuple[str, ...] = ()
    deleted: bool = False
    actor: str | None = None  # who caused the event (``BoardEvent.actor``), when the board said

    def __post_init__(self) -> None:
        # a row's copy of the board's time (``BoardEvent.at``): outside the range, no time
        if not TIME_MIN <= self.at <= TIME_MAX:
            msgspec.structs.force_setattr(self, "at", 0.0)
