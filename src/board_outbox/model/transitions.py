"""Every state transition of an effect row, declared once (River's ``JobSetStateIfRunningParams``).

A ``Transition`` says what a move does to the stored row: the fields it sets (new state, lease
cleared, outcome...), whether ``attempts`` goes up, and the error or audit entry it appends. The
adapters only apply one, handed to them as data: memory/ as a dict update, mongo/ as
``$set``/``$inc``/``$push`` built from the same struct, through the outbox port's

- ``apply_claimed`` / ``apply_claimed_many``: fenced on ``{ref, state: claimed, claim_id}`` (M8: a
  stolen lease makes it a no-op, False);
- ``apply_failed``: on ``{row_key, state: failed}`` (a replay only moves a dead-letter), and on
  the ``updated_at`` it was read with when given (a bulk replay: a row changed since is left);
- ``apply_unclaimed``: on ``{row_key, state, updated_at as read}`` (a bulk cancel of a pending
  row, a rerun's note on a done row: a row claimed, or changed in any way, since it was read is
  left as it is -- the fence, not the operator's timing, decides a race with a claim).

The worker's completer (``engine/work/completer.py``) builds the final ones (done, retry, park,
release); the heartbeat builds ``extend_lease``, the launch handler ``consumed``, the admin
``replay``.

    pending --claim--> claimed --done--> done
       ^                  |  \\--retry--> pending (attempts +1, error)
       |                  |  \\--park---> failed (error; attempts +1 unless the budget is spent)
       |                  \\--release--> pending (shutdown; attempts unchanged)
       |                  \\--defer----> pending (over a limit, F2: attempts unchanged, no error)
       |   claimed, lease expired --reclaim--> claimed (attempts +1, lease_expired error)
       \\------------------------------- failed --replay--> pending (attempts 0, audit)
    claimed --extend_lease--> claimed (lease_until later: the worker's heartbeat, O4)
    claimed --coalesce--> coalesced (coalescing: a newer row of its (subscription, card) runs
                          instead; attempts unchanged, ``coalesced_into`` names it; expires)
    claimed --coalesce_hold--> pending (coalescing: the newest row of its card is running; the
                          decision waits a moment; attempts unchanged, no error)
    pending --cancel--> cancelled (A8: an operator's bulk cancel; who, when, why audited;
                          never launched; expires like done)
    done --rerun_noted--> done (A8: a new row, ``rerun_of`` this one, was written; audited)
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec

from board_outbox.model.codec import from_doc
from board_outbox.model.errors import MalformedDocument, MalformedRow
from board_outbox.model.records import Claim
from board_outbox.model.rows import (
    CANCELLED,
    CLAIMED,
    COALESCED,
    DONE,
    FAILED,
    PENDING,
    AuditEntry,
    EffectRow,
    ErrorEntry,
)

LEASE_EXPIRED = "lease expired before the attempt finished"


class Transition(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    set: dict[str, Any]  # fields written as they are
    count_attempt: bool = False  # attempts +1
    error: ErrorEntry | None = None  # appended to ``errors``
    audit: AuditEntry | None = None  # appended to ``audit``


class Mark(msgspec.Struct, frozen=True):
    """One fenced transition of one claimed row, as the completer hands a batch of them to the
    outbox (``EffectOutbox.apply_marks``)."""

    ref: Any
    claim_id: str
    t: Transition


def refusal(doc: Mapping[str, Any], t: Transition) -> str | None:
    """Why a store refuses ``t`` on this stored document (None: it applies): ``$inc`` on an
    ``attempts`` that is not a number, ``$push`` onto an ``errors`` or ``audit`` that is not an
    array. MongoDB's rules; the memory twin refuses by them too, and a sweep of expired leases
    checks its rows by them before it writes any (R1)."""
    attempts = doc.get("attempts", 0)
    if t.count_attempt and (not isinstance(attempts, (int, float)) or isinstance(attempts, bool)):
        return (f"Cannot apply $inc to a value of non-numeric type: attempts is "
                f"{type(attempts).__name__}")
    for name, entry in (("errors", t.error), ("audit", t.audit)):
        if entry is not None and not isinstance(doc.get(name, []), list):
            return (f"The field '{name}' must be an array but is of type "
                    f"{type(doc.get(name)).__name__}")
    return None


def claim(*, claim_id: str, now: float, lease_until: float) -> Transition:
    """A due pending row: claimed under a fresh claim_id and lease (what it waited on, if it
    was deferred, is cleared)."""
    return Transition(name="claim", set={"state": CLAIMED, "claim_id": claim_id,
                                         "lease_until": lease_until, "updated_at": now,
                                         "waiting": None})


def reclaim(*, claim_id: str, now: float, lease_until: float) -> Transition:
    """A claimed row whose lease expired: claimed again, the lost attempt counted (M9)."""
    return Transition(name="reclaim", count_attempt=True,
                      set={"state": CLAIMED, "claim_id": claim_id, "lease_until": lease_until,
                           "updated_at": now})


def lease_expired(*, attempt: int, now: float) -> Transition:
    """Why a reclaimed row's attempt count went up (recorded right after ``reclaim``)."""
    return Transition(name="lease_expired", set={},
                      error=ErrorEntry(attempt=attempt, at=now, error=LEASE_EXPIRED,
                                       kind="lease_expired"))


def consumed(*, now: float) -> Transition:
    """M6: the one-shot labels were spent for this row; a retry launches without consuming."""
    return Transition(name="consumed", set={"consume_marked": True, "updated_at": now})


def extend_lease(*, now: float, lease_until: float) -> Transition:
    """O4: the heartbeat of a long effect pushes its lease out, fenced by claim_id like every mark
    (a stolen lease makes it a no-op and the heartbeat stops). Attempts are unchanged."""
    return Transition(name="extend_lease", set={"lease_until": lease_until, "updated_at": now})


def done(*, now: float, outcome: str) -> Transition:
    return Transition(name="done", set={
        "state": DONE, "outcome": outcome, "updated_at": now, "lease_until": None,
        "done_at": datetime.fromtimestamp(now, UTC),  # the TTL index's clock (M11b)
    })


def coalesce(*, now: float, into: str) -> Transition:
    """A coalescing launch superseded by the newer row ``into`` of its (subscription,
    card): terminal, attempts unchanged, no error; ``done_at`` is the clock of its TTL index
    (it expires like a done row)."""
    return Transition(name="coalesce", set={
        "state": COALESCED, "outcome": f"coalesced into {into}", "coalesced_into": into,
        "updated_at": now, "lease_until": None, "done_at": datetime.fromtimestamp(now, UTC),
    })


def coalesce_hold(*, now: float, not_before: float) -> Transition:
    """A coalescing row whose burst's newest row is running now: pending again after
    ``not_before``, attempts unchanged, no error, and no ``waiting`` (it waits on no limit:
    ``status`` counts only those; ``explain`` names its window)."""
    return Transition(name="coalesce_hold", set={"state": PENDING, "not_before": not_before,
                                                 "claim_id": None, "lease_until": None,
                                                 "updated_at": now, "waiting": None})


def retry(*, now: float, error: ErrorEntry, not_before: float) -> Transition:
    """Back to pending after ``not_before``, attempts +1, error appended."""
    return Transition(name="retry", count_attempt=True, error=error,
                      set={"state": PENDING, "not_before": not_before, "lease_until": None,
                           "updated_at": now})


def park(*, now: float, error: ErrorEntry, count_attempt: bool) -> Transition:
    """The dead-letter: state failed, error appended; ``count_attempt`` is False when the attempt
    was already counted (a reclaim spent the budget, or the row never decoded)."""
    return Transition(name="park", count_attempt=count_attempt, error=error,
                      set={"state": FAILED, "lease_until": None, "updated_at": now,
                           "outcome": "failed",
                           # the clock of the dead-letters' TTL index, when one is configured (O8)
                           "failed_at": datetime.fromtimestamp(now, UTC)})


def release(*, now: float) -> Transition:
    """Give a claim back (graceful shutdown): pending again, attempts unchanged."""
    return Transition(name="release", set={"state": PENDING, "claim_id": None, "lease_until": None,
                                           "updated_at": now})


def defer(*, now: float, not_before: float, reason: str) -> Transition:
    """F2: the launch is over a concurrency or rate limit: pending again after ``not_before``,
    attempts unchanged, no error appended; ``waiting`` says which limit (``status`` counts it)."""
    return Transition(name="defer", set={"state": PENDING, "not_before": not_before,
                                         "claim_id": None, "lease_until": None,
                                         "updated_at": now, "waiting": reason})


def replay(*, now: float, by: str, detail: str = "attempts reset") -> Transition:
    """A dead-letter back to pending, attempts reset, error history kept, audit appended (a bulk
    replay names itself in ``detail``)."""
    return Transition(
        name="replay",
        set={"state": PENDING, "attempts": 0, "not_before": now, "claim_id": None,
             "lease_until": None, "updated_at": now, "outcome": None},
        audit=AuditEntry(at=now, action="replay", by=by, detail=detail),
    )


def cancel(*, now: float, by: str, why: str) -> Transition:
    """A8: a pending row an operator cancels: terminal, never launched; who, when and why in its
    audit entry and its outcome; ``done_at`` is the clock of its TTL index (it expires like a
    done row, ``[retention] cancelled_seconds``)."""
    return Transition(
        name="cancel",
        set={"state": CANCELLED, "outcome": f"cancelled: {why}", "claim_id": None,
             "lease_until": None, "waiting": None, "updated_at": now,
             "done_at": datetime.fromtimestamp(now, UTC)},
        audit=AuditEntry(at=now, action="cancel", by=by, detail=why),
    )


# the audit action of a done row's rerun note (what ``dead_letters.already_rerun`` looks for, and
# what a rerun's N counts)
RERUN_NOTE = "rerun"


def rerun_noted(*, now: float, by: str, rerun_key: str, detail: str) -> Transition:
    """A8: a done row re-run as the new row ``rerun_key``: still done, its history says so
    (``updated_at`` moves, so a second apply of the same plan skips it: exactly one rerun)."""
    return Transition(name="rerun_noted", set={"updated_at": now},
                      audit=AuditEntry(at=now, action=RERUN_NOTE, by=by,
                                       detail=f"re-run as {rerun_key} ({detail})"))


def claim_of_row(ref: Any, row: EffectRow, t: Transition, *, claim_id: str,
                 lease_until: float) -> Claim:
    """The ``Claim`` for a row born claimed (``EffectOutbox.upsert_rows`` with claim terms): the
    row with the claim's fields set, as the store now holds it."""
    return Claim(ref=ref, claim_id=claim_id, lease_until=lease_until, tenant_id=row.tenant_id,
                 row=msgspec.structs.replace(row, **t.set), reclaimed=False)


def claim_of(
    ref: Any, doc: dict[str, Any], *, claim_id: str, lease_until: float, reclaimed: bool
) -> Claim:
    """The ``Claim`` for a row document just claimed (a row that does not decode is still claimed:
    the worker parks it as failed, ``decode_error`` says why)."""
    row: EffectRow | None = None
    err: str | None = None
    try:
        row = from_doc(doc, EffectRow, MalformedRow)
    except MalformedDocument as exc:
        err = str(exc)
    return Claim(ref=ref, claim_id=claim_id, lease_until=lease_until,
                 tenant_id=str(doc.get("tenant_id")), row=row, decode_error=err,
                 reclaimed=reclaimed)
