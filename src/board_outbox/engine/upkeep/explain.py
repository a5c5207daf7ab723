"""``explain``: why one effect row waits, for the operator asking -- the use case the CLI's
``board-outbox explain ROW_KEY`` and the console's row page both print.

The answer has two parts. The timeline: the event's insert (the event store's ``at``), the row's
materialization, each attempt that ended without success (the row's ``errors``: when, why),
operator actions (``audit``), the deferral it waits out, the claim in progress, the end. The row
keeps no per-attempt claim or start time, so none is invented: a moment the row does not date
has ``at`` None, and a note says what is not recorded. Then the holds, by name, from the ordered
checks of ``engine/upkeep/holds/``.
"""

from __future__ import annotations

from board_outbox.engine.upkeep.holds.case import Case, ExplainSettings
from board_outbox.engine.upkeep.holds.checks import CHECKS
from board_outbox.model.bad_documents import cap
from board_outbox.model.errors import MalformedDocument, RowNotFound
from board_outbox.model.explanation import (
    EXPLAIN_SCHEMA,
    Explanation,
    Hold,
    Malformed,
    Moment,
    RowFacts,
)
from board_outbox.model.row_keys import parse_row_key
from board_outbox.model.rows import CLAIMED, FAILED, PENDING, SETTLED_STATES, EffectRow
from board_outbox.model.times import stamp, time_problem
from board_outbox.ports import EventLog, Stores

__all__ = ["ExplainSettings", "explain", "explain_row"]

NOT_RECORDED = ("the row keeps no per-attempt claim or start times: an attempt that ended "
                "without success is one `errors` entry (when it ended, why); the claim in "
                "progress shows only its claim id and lease")
_ERROR_KINDS = {"error": "attempt_failed", "lease_expired": "lease_expired",
                "permanent": "attempt_parked"}


async def explain(stores: Stores, row_key: str, now: float,
                  settings: ExplainSettings | None = None) -> Explanation:
    """Explain the row stored under ``row_key`` at ``now``. Raises ``InvalidRowKey`` (not a row
    key: nothing is read) or ``RowNotFound``; a stored document that does not decode is
    explained as ``malformed``, never raised."""
    parse_row_key(row_key)
    settings = settings or ExplainSettings()
    try:
        row = await stores.outbox.get(row_key)
    except MalformedDocument as exc:
        problem = cap(str(exc), 500)
        return Explanation(
            schema=EXPLAIN_SCHEMA, row_key=row_key, at=now, row=None,
            holds=[Malformed(summary=f"the stored document does not decode: {problem}; the "
                                     "worker dead-letters it when it claims it (or the stuck-row "
                                     "sweep, if no claim can pick it)", problem=problem)],
            timeline=[], notes=["nothing else is read from a document that does not decode"])
    if row is None:
        raise RowNotFound(row_key)
    return await explain_row(stores, row, now, settings)


async def explain_row(stores: Stores, row: EffectRow, now: float,
                      settings: ExplainSettings | None = None) -> Explanation:
    """``explain`` of a row already read (the console's row page shows the row beside it)."""
    settings = settings or ExplainSettings()
    row_key = row.row_key
    case = Case(row=row, now=now, stores=stores, settings=settings)
    holds: list[Hold] = []
    for check in CHECKS:
        holds += await check(case)
    timeline = await _timeline(row, stores.events, case.notes)
    if row.state == CLAIMED or row.errors:
        case.notes.append(NOT_RECORDED)
    if row.state == CLAIMED:
        case.notes.append("which replica holds the claim is not recorded on the row")
    if row.priority:
        case.notes.append(f"priority {row.priority}: within its tenant's share of a claim, "
                          "rows of a higher priority go before it and rows of a lower one after "
                          "it, whatever their due time (a count of rows ahead is by due time)")
    return Explanation(schema=EXPLAIN_SCHEMA, row_key=row_key, at=now, row=_facts(row, settings),
                       holds=holds, timeline=timeline, notes=case.notes)


def _facts(row: EffectRow, settings: ExplainSettings) -> RowFacts:
    return RowFacts(tenant_id=row.tenant_id, seq=row.seq, kind=row.kind,
                    target=row.sub_id or row.projection, state=row.state, attempts=row.attempts,
                    max_attempts=settings.worker.max_attempts, not_before=row.not_before,
                    claim_id=row.claim_id, lease_until=row.lease_until, waiting=row.waiting,
                    created_at=row.created_at, updated_at=row.updated_at,
                    priority=row.priority)


async def _event(row: EffectRow, events: EventLog, notes: list[str]) -> Moment:
    """The event's insert, from the event store (one read by (tenant, seq)); the row's snapshot
    when the store no longer has it."""
    ev = row.event
    what = f"{ev.type} on card {ev.card_id}" if ev is not None else "no snapshot on the row"
    got = await events.read_after(row.tenant_id, row.seq - 1, 1)
    if got and got[0].seq == row.seq:
        raw = got[0].doc.get("at")
        at = stamp(raw)  # R7: a time in range, or none
        if not at:  # 0: the board gave the event no time (``BoardEvent.at``)
            notes.append(f"the event's stored at ({cap(repr(raw), 60)}) is not a time"
                         + (f" ({problem})" if (problem := time_problem("at", raw)) else ""))
            at = None
        return Moment(at=at, what="event", detail=f"{what}: inserted into the event store")
    notes.append("the event store no longer holds its event: its time is the row's snapshot's")
    return Moment(at=ev.at if ev is not None and ev.at else None, what="event", detail=what)


async def _timeline(row: EffectRow, events: EventLog, notes: list[str]) -> list[Moment]:
    out = [await _event(row, events, notes),
           Moment(at=row.materialized_at or row.created_at or None, what="materialized",
                  detail=f"{row.kind} row written")]
    for e in row.errors:
        out.append(Moment(at=e.at, what=_ERROR_KINDS.get(e.kind, e.kind), attempt=e.attempt,
                          detail=e.error))
    for a in row.audit:
        out.append(Moment(at=a.at, what=a.action,
                          detail=f"by {a.by}" + (f": {a.detail}" if a.detail else "")))
    if row.state == PENDING and row.waiting:
        # a deferral is the last write of a row that waits on a limit (a claim clears waiting)
        out.append(Moment(at=row.updated_at or None, what="deferred", detail=row.waiting))
    elif row.state == CLAIMED:
        out.append(Moment(at=None, what="claimed", attempt=row.attempts + 1,
                          detail=f"claim {row.claim_id} (when is not recorded)"))
    elif row.state == FAILED:
        out.append(Moment(at=row.updated_at or None, what="dead_lettered",
                          detail=row.errors[-1].error if row.errors else ""))
    elif row.state in SETTLED_STATES:  # done, coalesced or cancelled: failed is above
        out.append(Moment(at=row.done_at.timestamp() if row.done_at is not None else None,
                          what=row.state, detail=row.outcome or ""))
    # by time (a stable sort); an undated moment sorts with the dated one written before it
    keys, last = [], float("-inf")
    for m in out:
        last = m.at if m.at is not None else last
        keys.append(last)
    return [m for _k, m in sorted(zip(keys, out, strict=True), key=lambda km: km[0])]
