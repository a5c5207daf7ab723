"""The event-reading step shared by the tail and ``rebuild``: read events after a cursor, keep the
contiguous prefix (M7's one young-gap rule), decode, fetch the cards in one round trip, and
normalize each event against its card.

Three outcomes per event, never collapsed (ADR-094 consequence 1):
- an ``EventSnapshot``: materialize it;
- ``CardNotFound``: the card is definitively deleted, skip the event;
- ``StoreUnavailable``: the store is failing; it propagates, the caller's cursor stays put.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from board_outbox.model.bad_documents import OnceLog, cap
from board_outbox.model.board import BoardEvent, Card, EventSnapshot
from board_outbox.model.codec import from_doc
from board_outbox.model.errors import CardNotFound, MalformedCard, MalformedDocument, MalformedEvent
from board_outbox.model.validation import MAX_CARD_LABELS, MAX_CARD_TITLE, is_seq
from board_outbox.ports import CardStore, EventLog, EventRecord

log = logging.getLogger("board_outbox.tail")
_once = OnceLog(log)

DELETED_TYPES = frozenset({"card.deleted"})


def decode_event(tenant_id: str, rec: EventRecord) -> BoardEvent:
    ev = from_doc(rec.doc, BoardEvent, MalformedEvent)
    if ev.tenant_id != tenant_id or ev.seq != rec.seq:
        raise MalformedEvent(rec.seq, f"document says tenant {ev.tenant_id!r} seq {ev.seq}")
    if not ev.type or not ev.card_id:
        raise MalformedEvent(rec.seq, "empty type or card_id")
    return ev


def snapshot(ev: BoardEvent, cards: Mapping[str, Card | MalformedDocument]) -> EventSnapshot:
    """Normalize against a batch of cards fetched in one round trip (``CardStore.get_many``)."""
    if ev.type in DELETED_TYPES:
        return EventSnapshot(seq=ev.seq, type=ev.type, card_id=ev.card_id, at=ev.at, deleted=True,
                             actor=ev.actor)
    card = cards.get(ev.card_id)
    if card is None:
        raise CardNotFound(ev.tenant_id, ev.card_id)
    if isinstance(card, MalformedDocument):
        raise card
    label_chars = sum(len(label) for label in card.labels)
    if (len(card.title) > MAX_CARD_TITLE or len(card.column) > MAX_CARD_TITLE
            or len(card.labels) > MAX_CARD_LABELS or label_chars > MAX_CARD_TITLE):
        # R2: every row embeds the card; one near 16 MB would fail the whole batch's upsert
        raise MalformedCard(ev.card_id, f"title of {len(card.title)} characters, column of "
                            f"{len(card.column)}, {len(card.labels)} labels of {label_chars} "
                            f"characters (limits {MAX_CARD_TITLE} characters, "
                            f"{MAX_CARD_LABELS} labels)")
    return EventSnapshot(
        seq=ev.seq, type=ev.type, card_id=ev.card_id, at=ev.at,
        title=card.title, column=card.column, labels=card.labels, actor=ev.actor,
    )


def card_ids(events: Iterable[BoardEvent]) -> set[str]:
    return {ev.card_id for ev in events if ev.type not in DELETED_TYPES}


class GapTracker:
    """M7, the one young-gap rule: a missing seq is young -- it may still be inserting, so the
    prefix stops before it -- until ``young_gap_seconds`` have passed since it was first seen;
    older, it is a dead allocation, stepped over with one warning.

    The tail first sees a gap when a batch shows it (Marten's high-water-mark ageing). A one-shot
    reader with no earlier sighting (``rebuild``) passes ``event_time=True``: the gap has existed
    at least since the event right after it was written, so that is when it was first seen.
    """

    def __init__(self, young_gap_seconds: float, *, event_time: bool = False, warn: bool = True) -> None:
        self.young_gap_seconds = young_gap_seconds
        self.event_time = event_time
        self.warn = warn
        self._first_seen: dict[tuple[str, int], float] = {}
        self._warned: set[tuple[str, int]] = set()

    def is_dead(self, tenant_id: str, missing: int, after: EventRecord, now: float) -> bool:
        """Is ``missing``.. (up to ``after.seq``) a dead allocation, to be stepped over?"""
        seen = now
        if self.event_time:
            at = after.doc.get("at")
            seen = min(now, float(at) if isinstance(at, (int, float)) else 0.0)
        age = now - self._first_seen.setdefault((tenant_id, missing), seen)
        if age < self.young_gap_seconds:
            return False
        if self.warn and (tenant_id, missing) not in self._warned:
            self._warned.add((tenant_id, missing))
            log.warning(
                "stepping over dead allocation seq %d..%d (gap older than %.0fs)",
                missing, after.seq - 1, self.young_gap_seconds,
                extra={"tenant_id": tenant_id, "seq": missing},
            )
        return True

    def forget_below(self, tenant_id: str, seq: int) -> None:
        for key in [k for k in self._first_seen if k[0] == tenant_id and k[1] <= seq]:
            del self._first_seen[key]
            self._warned.discard(key)


# (seq, error, head of the batch?) -> True: skip this event for good; False: stop before it.
OnMalformed = Callable[[int, MalformedDocument, bool], bool]


@dataclass
class Reading:
    """One batch read after a cursor: ``passed`` holds every seq the cursor may now pass, in order,
    with its snapshot (None: skipped -- a deleted card or a malformed event given up on)."""

    read: int = 0
    passed: list[tuple[int, EventSnapshot | None]] = field(default_factory=list)
    deleted: int = 0
    stepped_gaps: int = 0
    young_gap: int | None = None  # the missing seq a young gap stopped the prefix at
    beyond_counter: int | None = None  # a seq past the tenant's allocated counter stopped it
    traces: dict[int, object] = field(default_factory=dict)  # seq -> its producer's ``trace``

    @property
    def snapshots(self) -> list[EventSnapshot]:
        return [snap for _, snap in self.passed if snap is not None]


async def read_batch(
    *,
    events: EventLog,
    cards: CardStore,
    tenant_id: str,
    after: int,
    limit: int,
    gaps: GapTracker,
    now: float,
    on_malformed: OnMalformed,
    records: list[EventRecord] | None = None,
) -> Reading:
    """Read up to ``limit`` events after ``after`` and normalize the contiguous, readable prefix.
    ``records``: the events after ``after``, without a hole, already in hand (the change
    stream's, saving the round trip) instead of the read. ``StoreUnavailable`` propagates (M1): nothing is
    passed."""
    if records is None:
        records = await events.read_after(tenant_id, after, limit)
    out = Reading(read=len(records))
    if not records:
        return out
    # Pass 1: the contiguous, decodable prefix (None: a malformed event skipped for good).
    decoded: list[tuple[int, BoardEvent | None]] = []
    expected = after + 1
    counter: int | None = None
    for rec in records:
        if not is_seq(rec.seq):
            # R2: a seq that is not a true int (2.5, Decimal128, "7", true) cannot be a cursor
            # position: the event is left out, with one error line per event.
            _once((tenant_id, "seq", repr(rec.seq)), logging.ERROR,
                  "ignoring a poison event: seq %s (%s) is not an integer seq", cap(repr(rec.seq), 100),
                  type(rec.seq).__name__, extra={"tenant_id": tenant_id})
            continue
        if rec.seq != expected:
            if counter is None:
                counter = await events.allocated_seq(tenant_id)
            if rec.seq > counter:
                # R2: beyond the tenant's allocated counter: not a dead allocation but poison.
                # Never step the cursor there; later (real) seqs sort before it and still flow.
                _once((tenant_id, "beyond", rec.seq), logging.ERROR,
                      "poison event: seq %d is beyond the tenant's allocated counter %d; the "
                      "cursor will not pass it", rec.seq, counter,
                      extra={"tenant_id": tenant_id, "seq": rec.seq})
                out.beyond_counter = rec.seq
                break
            if not gaps.is_dead(tenant_id, expected, rec, now):
                out.young_gap = expected
                break
            out.stepped_gaps += rec.seq - expected
        try:
            decoded.append((rec.seq, decode_event(tenant_id, rec)))
            if (stored := rec.doc.get("trace")) is not None:  # parsed per event by the tail
                out.traces[rec.seq] = stored
        except MalformedDocument as exc:
            if not on_malformed(rec.seq, exc, not decoded):
                break
            decoded.append((rec.seq, None))
        expected = rec.seq + 1
    # Pass 2: normalize every event against its card, all cards in one round trip.
    found = await cards.get_many(tenant_id, card_ids(ev for _, ev in decoded if ev is not None))
    for i, (seq, ev) in enumerate(decoded):
        snap: EventSnapshot | None = None
        if ev is not None:
            try:
                snap = snapshot(ev, found)
            except CardNotFound:
                out.deleted += 1  # definitively deleted: the only skip (M1)
            except MalformedDocument as exc:  # an unreadable card: the malformed path
                if not on_malformed(seq, exc, i == 0):
                    break
        out.passed.append((seq, snap))
    return out
