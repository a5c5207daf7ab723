"""Effect rows: one document of ``trigger_effects`` per effect owed, its states and history
entries, how a new row is made from an event and a subscription or projection, and its slim
stored form.

Nothing here touches a store.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

import msgspec

from board_outbox.model.board import EventSnapshot
from board_outbox.model.bounds import Priority
from board_outbox.model.codec import to_doc
from board_outbox.model.ids import LAUNCH, PROJECTION
from board_outbox.model.row_keys import launch_row_key, projection_row_key
from board_outbox.model.subscriptions import Subscription
from board_outbox.model.times import Stamp

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
