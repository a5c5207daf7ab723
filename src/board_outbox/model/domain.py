"""Domain documents (msgspec Structs) and the pure functions over them.

Nothing here touches a store. Documents are stored as plain mappings (``to_doc``) and decoded
back with ``from_doc``; a document that does not decode raises a typed ``Malformed*`` error.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec

from board_outbox.model.bad_documents import BAD_DOCUMENTS, cap
from board_outbox.model.bounds import InFlight, PerSecond, Priority
from board_outbox.model.errors import InvalidId, InvalidRowKey, MalformedDocument
from board_outbox.model.times import TIME_MAX, TIME_MIN, Stamp, stamp, time_problem

LAUNCH: Final = "launch"
PROJECTION: Final = "projection"

RowState = Literal["pending", "claimed", "done", "failed", "coalesced", "cancelled"]
PENDING: Final = "pending"
CLAIMED: Final = "claimed"
DONE: Final = "done"
FAILED: Final = "failed"
# coalescing: a launch superseded by a newer row of its (subscription, card) inside the
# subscription's coalescing window; terminal, ``coalesced_into`` names that row; expires like done
COALESCED: Final = "coalesced"
# A8: a row an operator cancelled before it ran (who, when and why in its audit entry);
# terminal, never launched; expires like done (``done_at`` is its TTL clock)
CANCELLED: Final = "cancelled"
SETTLED_STATES: Final = (DONE, FAILED, COALESCED, CANCELLED)
LIVE_STATES: Final = (PENDING, CLAIMED)
# done rows expire this long after ``done_at`` (the TTL index, M11b); dead-letters never do
DONE_TTL_SECONDS: Final = 7 * 24 * 3600

_ID = re.compile(r"^[A-Za-z0-9_.:@-]{1,200}$")


def check_kind(kind: object) -> str:
    """A subscription's effect kind: an id (as ``check_id``), and not ``projection`` (projection
    rows come from the configured projections, one per event, never from a subscription)."""
    if not isinstance(kind, str):
        raise InvalidId(f"invalid kind {kind!r}: not a string")
    check_id("kind", kind)
    if kind == PROJECTION:
        raise InvalidId("invalid kind 'projection': projection rows come from the configured "
                        "projections, not from a subscription")
    return kind


def check_id(what: str, value: str) -> str:
    """Tenant, subscription and projection ids must be safe to embed in a row key."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidId(
            f"invalid {what} {value!r}: use 1-200 characters from A-Z a-z 0-9 _ . : @ -"
        )
    return value


# --- board side -------------------------------------------------------------------------------


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


class MatchRule(msgspec.Struct, frozen=True, kw_only=True):
    """Empty fields match anything. ``labels_all``: the card must carry every one of them."""

    event_types: tuple[str, ...] = ()
    column: str | None = None
    labels_all: tuple[str, ...] = ()


MAX_COALESCE_SECONDS: Final = 86400.0
# a coalescing window's seconds: finite (NaN and infinity fail the bounds), above 0, at most a day
WindowSeconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_COALESCE_SECONDS)]


class Coalesce(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A subscription's coalescing window: a launch row waits ``quiet_seconds`` after
    it was materialized; a newer row of the same (subscription, card) by then supersedes it, so
    a burst of edits launches once, with the newest snapshot -- and no later than
    ``max_wait_seconds`` after the burst's first row (``0 < quiet <= max_wait <= 1 day``)."""

    quiet_seconds: WindowSeconds
    max_wait_seconds: WindowSeconds

    def __post_init__(self) -> None:
        if self.quiet_seconds > self.max_wait_seconds:
            raise ValueError(f"coalesce quiet_seconds {self.quiet_seconds} is above "
                             f"max_wait_seconds {self.max_wait_seconds}")


class Subscription(msgspec.Struct, frozen=True, kw_only=True):
    """What a tenant wants done when an event matches ``rule``: one row of effect ``kind`` per
    matching event (``launch``, the default, launches ``bot``; any other kind is run by the
    handler registered for it, which reads ``bot`` as it likes, e.g. a recipient). A subscription
    stored before ``kind`` existed reads as a launch.

    ``max_in_flight`` / ``max_per_second`` (F2) override the ``[limits]`` bot limits for the
    launches of this subscription (0: no limit; None, or absent: the configured ones).

    ``priority`` (-10..10, default 0) orders the subscription's rows within their tenant's fair
    share (F1, ``model/fairness``): higher first. Each row carries the priority it was
    materialized with, so a change affects only rows materialized after it."""

    sub_id: str
    tenant_id: str
    bot: str
    rule: MatchRule = MatchRule()
    consume_labels: tuple[str, ...] = ()
    enabled: bool = True
    kind: str = LAUNCH
    max_in_flight: InFlight | None = None
    max_per_second: PerSecond | None = None
    priority: Priority = 0
    # --- coalescing (a burst of edits launches once): None (the default) launches once per matching event
    coalesce: Coalesce | None = None


def matches(sub: Subscription, ev: EventSnapshot) -> bool:
    """Does ``sub`` want ``ev``? Pure; used at materialization and re-verified at execution."""
    if not sub.enabled or ev.deleted:
        return False
    rule = sub.rule
    if rule.event_types and ev.type not in rule.event_types:
        return False
    if rule.column is not None and ev.column != rule.column:
        return False
    if rule.labels_all and not set(rule.labels_all).issubset(ev.labels):
        return False
    # A consume_labels subscription fires only while its one-shot labels are on the card.
    return not (sub.consume_labels and not set(sub.consume_labels).issubset(ev.labels))


# --- outbox side ------------------------------------------------------------------------------


class ErrorEntry(msgspec.Struct, frozen=True, kw_only=True):
    attempt: int
    at: Stamp
    error: str
    kind: str = "error"  # error | lease_expired | permanent


class AuditEntry(msgspec.Struct, frozen=True, kw_only=True):
    at: Stamp
    action: str
    by: str = ""
    detail: str = ""


class TraceContext(msgspec.Struct, frozen=True, kw_only=True):
    traceparent: str
    tracestate: str = ""


class EffectRow(msgspec.Struct, kw_only=True):
    """One document of ``trigger_effects``: an effect owed for one board event.

    ``kind`` defaults to ``launch``: a row stored before the field existed decodes as a launch.
    ``attempts`` counts attempts that ended without success (errors and expired leases); the
    attempt in progress is ``attempts + 1``. Every time is a ``Stamp`` (R7): a document with one
    out of range does not decode, and costs only itself.
    """

    tenant_id: str
    row_key: str
    seq: int
    kind: str = LAUNCH
    sub_id: str | None = None
    projection: str | None = None
    event: EventSnapshot | None = None
    state: RowState = PENDING
    attempts: int = 0
    not_before: Stamp = 0.0
    claim_id: str | None = None
    lease_until: Stamp | None = None
    consume_marked: bool = False
    errors: list[ErrorEntry] = msgspec.field(default_factory=list)
    audit: list[AuditEntry] = msgspec.field(default_factory=list)
    outcome: str | None = None
    trace: TraceContext | None = None
    created_at: Stamp = 0.0
    updated_at: Stamp = 0.0
    materialized_at: Stamp = 0.0
    done_at: datetime | None = None  # a BSON date (the TTL index's); one no date holds: malformed
    # F2: why the row waits (a limit it was over when last claimed); cleared by the next claim
    waiting: str | None = None
    # its subscription's priority when it was materialized (projection rows: 0); higher first
    # within its tenant's share of a claim (F1, ``model/fairness``)
    priority: Priority = 0
    # --- coalescing: set only on the rows of a coalescing subscription.
    # ``burst_at``: when the burst this row belongs to began (born ``created_at``; an older row
    # superseded by this one lowers it to its own); ``coalesced_into``: the row that superseded
    # this one (state ``coalesced``)
    # ``burst_closed``: its burst's deadline passed while it was the burst's newest row: it
    # launches when it runs, whatever is newer
    burst_at: Stamp | None = None
    coalesced_into: str | None = None
    burst_closed: bool = False
    # A8: a rerun of a done row names the row it reruns (its own key ends ``/rerun/N``: a new
    # Idempotency-Key for the bot, and both rows stay in the history)
    rerun_of: str | None = None


def launch_row_key(tenant_id: str, seq: int, sub_id: str) -> str:
    return f"{tenant_id}/{seq}/sub/{sub_id}"


def projection_row_key(tenant_id: str, seq: int, projection: str) -> str:
    # "proj" in the third place: no (event, subscription) pair can produce this key.
    return f"{tenant_id}/{seq}/proj/{projection}"


class RowKey(msgspec.Struct, frozen=True, kw_only=True):
    """A row key read back into its parts (``parse_row_key``): ``part`` is ``sub`` (a
    subscription's row, any kind) or ``proj`` (a projection's row); ``name`` the sub_id or the
    projection."""

    tenant_id: str
    seq: int
    part: Literal["sub", "proj"]
    name: str
    rerun: int = 0  # A8: the N of a rerun's ``/rerun/N`` (0: not a rerun)


MAX_SEQ: Final = 2**63 - 1
MAX_RERUN_DEPTH: Final = 8  # reruns of reruns a key may carry


def parse_row_key(text: str) -> RowKey:
    """The parts of a row key as ``launch_row_key`` and ``projection_row_key`` write it
    (``TENANT/SEQ/sub/SUB_ID`` or ``TENANT/SEQ/proj/PROJECTION``), a rerun's (A8) followed by
    ``/rerun/N``. Raises ``InvalidRowKey`` with one line saying what is wrong (the operator's
    typo never reaches a store)."""
    shown = repr(text) if len(text) <= 120 else repr(text[:100]) + f"... ({len(text)} characters)"
    form = "TENANT/SEQ/sub/SUB_ID or TENANT/SEQ/proj/PROJECTION"
    parts = text.split("/")
    reruns = parts[4:]
    if len(parts) < 4 or len(reruns) % 2 or len(reruns) > 2 * MAX_RERUN_DEPTH or any(
            word != "rerun" or not (n.isascii() and n.isdigit() and 0 < len(n) <= 9
                                    and int(n) > 0)
            for word, n in zip(reruns[::2], reruns[1::2], strict=True)):
        raise InvalidRowKey(f"{shown} is not a row key: expected {form}")
    tenant, seq, part, name = parts[:4]
    if part not in ("sub", "proj"):
        raise InvalidRowKey(f"{shown} is not a row key: the third part is {part[:20]!r}, "
                            f"not 'sub' or 'proj' ({form})")
    if not (seq.isascii() and seq.isdigit()) or not 1 <= int(seq) <= MAX_SEQ:
        raise InvalidRowKey(f"{shown} is not a row key: seq {seq[:30]!r} is not a whole "
                            "number from 1 to 2^63-1")
    for what, value in (("tenant", tenant), ("subscription" if part == "sub" else "projection",
                                             name)):
        if not _ID.fullmatch(value):  # fullmatch: "$" alone lets a trailing newline by
            raise InvalidRowKey(f"{shown} is not a row key: the {what} part {value[:30]!r} is "
                                "not 1-200 characters from A-Z a-z 0-9 _ . : @ -")
    return RowKey(tenant_id=tenant, seq=int(seq), part="sub" if part == "sub" else "proj",
                  name=name, rerun=int(reruns[-1]) if reruns else 0)


def rerun_row_key(row_key: str, n: int) -> str:
    """A8: the key of the ``n``-th rerun of the row ``row_key`` (a new Idempotency-Key)."""
    return f"{row_key}/rerun/{n}"


def new_launch_row(
    tenant_id: str, ev: EventSnapshot, sub: Subscription, now: float,
    trace: TraceContext | None = None,
) -> EffectRow:
    """A ``launch`` row for ``sub`` (whatever kind it names: see ``new_subscription_row``)."""
    return EffectRow(
        tenant_id=tenant_id, row_key=launch_row_key(tenant_id, ev.seq, sub.sub_id), seq=ev.seq,
        kind=LAUNCH, sub_id=sub.sub_id, event=ev, trace=trace, priority=sub.priority,
        not_before=now, created_at=now, updated_at=now, materialized_at=now,
    )


def new_subscription_row(
    tenant_id: str, ev: EventSnapshot, sub: Subscription, now: float,
    trace: TraceContext | None = None,
) -> EffectRow:
    """The row ``sub`` owes for ``ev``: of the subscription's ``kind``, carrying ``sub_id`` and the
    event snapshot, keyed by (event, subscription) whatever the kind -- so a subscription whose
    kind is edited never owes a second row for an event it already matched. No bot: the handler
    reads the subscription when the row runs (a launch re-verifies it there, M10b)."""
    row = EffectRow(
        tenant_id=tenant_id, row_key=launch_row_key(tenant_id, ev.seq, sub.sub_id), seq=ev.seq,
        kind=sub.kind, sub_id=sub.sub_id, event=ev, trace=trace, priority=sub.priority,
        not_before=now, created_at=now, updated_at=now, materialized_at=now,
    )
    if sub.coalesce is not None and sub.kind == LAUNCH:
        # coalescing: due after the quiet time; ``burst_at`` marks it a coalescing row (the
        # partial index the supersede check reads holds only these)
        row.not_before = now + sub.coalesce.quiet_seconds
        row.burst_at = now
    return row


def new_projection_row(
    tenant_id: str, ev: EventSnapshot, projection: str, now: float,
    trace: TraceContext | None = None,
) -> EffectRow:
    return EffectRow(
        tenant_id=tenant_id, row_key=projection_row_key(tenant_id, ev.seq, projection), seq=ev.seq,
        kind=PROJECTION, projection=projection, event=ev, trace=trace,
        not_before=now, created_at=now, updated_at=now, materialized_at=now,
    )


def born_due(row: EffectRow) -> bool:
    """Whether a new row is due as it is written: only those may be born claimed (handed to the
    worker by the tail). A coalescing row waits its quiet time first."""
    return row.not_before <= row.created_at


# A new row's fields that are left out of its stored document while at their zero value: every
# reader decodes a missing one as that value (``from_doc``), the update operators create them
# ($inc, $push, $set), and no query matches on their absence (the pick's ``priority: {$gt: 0}``
# means a missing one as 0 does). ``state``, ``not_before``, ``kind`` and the timestamps stay:
# queries and indexes use them.
_ROW_ZERO_FIELDS: Final = ("sub_id", "projection", "attempts", "claim_id", "lease_until",
                           "consume_marked", "errors", "audit", "outcome", "trace", "done_at",
                           "coalesced_into", "burst_closed", "priority", "rerun_of")
# left out only while None (0.0 is a time an injected clock may start at)
_ROW_NONE_FIELDS: Final = ("burst_at",)
_SNAPSHOT_ZERO_FIELDS: Final = ("deleted", "actor")


def new_row_doc(row: EffectRow, shared: dict[int, Any] | None = None) -> dict[str, Any]:
    """A new row as its slim store document: ``to_doc`` without the fields at their zero value
    (fewer bytes to encode, send and store per row; decodes to the same row).

    ``shared`` (one dict per batch) lets the rows of one event share its snapshot's document,
    and the rows of one batch their trace context's: converted once, not once per row. The
    documents are for encoding only: they may share those sub-documents, so never mutate one."""
    doc = msgspec.structs.asdict(row)
    for name in _ROW_ZERO_FIELDS:
        if not doc[name]:
            del doc[name]
    for name in _ROW_NONE_FIELDS:
        if doc[name] is None:
            del doc[name]
    for name in ("event", "trace"):
        value = doc.get(name)
        if value is None:
            continue
        sub = None if shared is None else shared.get(id(value))
        if sub is None:
            sub = to_doc(value)
            if name == "event":
                for zero in _SNAPSHOT_ZERO_FIELDS:
                    if not sub[zero]:
                        del sub[zero]
            if shared is not None:
                shared[id(value)] = sub
        doc[name] = sub
    for name in ("errors", "audit"):  # a new row has none; any other is converted whole
        if name in doc:
            doc[name] = msgspec.to_builtins(doc[name])
    return doc


# --- documents <-> structs ---------------------------------------------------------------------

T = TypeVar("T")


def to_doc(obj: msgspec.Struct) -> dict[str, Any]:
    """A Struct as a store document (datetimes stay datetimes: Mongo's TTL needs a BSON date)."""
    doc = msgspec.to_builtins(obj, builtin_types=(datetime,))
    assert isinstance(doc, dict)
    return doc


_UNREADABLE: ContextVar[list[MalformedDocument] | None] = ContextVar("unreadable", default=None)
UNREADABLE_KEPT: Final = 1000  # documents one ``unreadable()`` block keeps at most


@contextmanager
def unreadable() -> Iterator[list[MalformedDocument]]:
    """The documents that fail to decode (``from_doc``) in the reads made inside the block, by
    this task: a listing that leaves them out can still name them, and say why."""
    got: list[MalformedDocument] = []
    token = _UNREADABLE.set(got)
    try:
        yield got
    finally:
        _UNREADABLE.reset(token)


def from_doc(
    doc: Mapping[str, Any], typ: type[T], error: Callable[[object, str], MalformedDocument]
) -> T:
    """Decode a stored document; unknown fields (``_id``...) are ignored, bad ones raise ``error``
    naming the field and what it holds (a time out of range says so: R7)."""
    try:
        return msgspec.convert(doc, typ, builtin_types=(datetime,))
    except (msgspec.ValidationError, TypeError) as exc:
        ref: object = doc
        detail = str(exc)
        if isinstance(doc, Mapping):
            ref = doc.get("row_key") or doc.get("seq") or doc.get("_id")
            if isinstance(exc, msgspec.ValidationError):
                detail = decode_problem(doc, detail)
        err = error(ref, detail)
        seen = _UNREADABLE.get()
        if seen is not None and len(seen) < UNREADABLE_KEPT:
            seen.append(err)
        raise err from None


_PATH = re.compile(r" - at `\$((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])+)`$")
_TIME_BOUNDS = (f"<= {TIME_MAX}", f">= {TIME_MIN}")


def decode_problem(doc: Mapping[str, Any], msg: str) -> str:
    """msgspec's refusal of ``doc`` (``msg``) with the stored value it refused; a time out of
    range as R7's one line (``times.time_problem``)."""
    m = _PATH.search(msg)
    if m is None:
        return msg
    value: Any = doc
    for part in re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]", m.group(1)):
        name, index = part
        if name and isinstance(value, Mapping) and name in value:
            value = value[name]
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return msg
    path = m.group(1).lstrip(".")
    if msg.startswith("Expected `float`") and any(b in msg for b in _TIME_BOUNDS) and \
            stamp(value) is None:
        return time_problem(path, value) or msg
    return f"{msg} (stored: {cap(repr(value), 80)})"


class SubscriptionIndex:
    """A tenant's enabled subscriptions indexed by (event type, column), so matching an event
    costs what its candidates cost, not what the tenant's subscription count costs."""

    def __init__(self, subs: list[Subscription]) -> None:
        self._by: dict[tuple[str | None, str | None], list[Subscription]] = {}
        for sub in subs:
            if not sub.enabled:
                continue
            for etype in sub.rule.event_types or (None,):
                self._by.setdefault((etype, sub.rule.column), []).append(sub)

    def matching(self, ev: EventSnapshot) -> list[Subscription]:
        out: list[Subscription] = []
        get = self._by.get
        for key in ((ev.type, ev.column), (ev.type, None), (None, ev.column), (None, None)):
            for sub in get(key, ()):
                if matches(sub, ev):
                    out.append(sub)
        return out
