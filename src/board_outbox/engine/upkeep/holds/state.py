"""The holds the row's own fields say: done, dead-lettered, under a lease (live or expired),
backing off after a failed attempt."""

from __future__ import annotations

from board_outbox.engine.upkeep.holds.case import Case, from_now, last_error
from board_outbox.model.explanation import Backoff, DeadLettered, Done, ExpiredLease, Hold, Lease, NotDue
from board_outbox.model.rows import CLAIMED, DONE, FAILED, PENDING


async def done(c: Case) -> list[Hold]:
    r = c.row
    if r.state != DONE:
        return []
    at = r.done_at.timestamp() if r.done_at is not None else None
    return [Done(summary=f"done: {r.outcome or 'no outcome recorded'}", done_at=at,
                 outcome=r.outcome)]


async def dead_lettered(c: Case) -> list[Hold]:
    r = c.row
    if r.state != FAILED:
        return []
    err = last_error(r)
    return [DeadLettered(
        summary=(f"dead-lettered after {r.attempts} attempt(s): {err or 'no error recorded'}; "
                 "it waits for a replay"),
        attempts=r.attempts, error=err,
        replay=f"board-outbox dead-letters replay {r.row_key}")]


async def lease(c: Case) -> list[Hold]:
    r = c.row
    if r.state != CLAIMED:
        return []
    attempt = r.attempts + 1
    budget = c.settings.worker.max_attempts
    if r.lease_until is not None and r.lease_until > c.now:
        return [Lease(summary=(f"claimed: attempt {attempt} of {budget} under claim "
                               f"{r.claim_id}, in a worker's hands (running, or queued in its "
                               f"batch or hand-off); lease ends {from_now(r.lease_until - c.now)}"),
                      claim_id=r.claim_id, attempt=attempt, until=r.lease_until)]
    every = c.settings.worker.reclaim_every_seconds
    if r.lease_until is None:
        what = "claimed with no lease recorded: the stuck-row sweep parks it"
    else:
        what = (f"lease of claim {r.claim_id} expired {from_now(r.lease_until - c.now)}: stealable; "
                f"the next expired-lease sweep (every {every:g}s on each replica) reclaims it "
                f"and counts the lost attempt")
        if attempt >= budget:
            what += f" -- that was attempt {attempt} of {budget}: it is dead-lettered then"
    return [ExpiredLease(summary=what, claim_id=r.claim_id, attempt=attempt,
                         expired_at=r.lease_until)]


async def backoff(c: Case) -> list[Hold]:
    r = c.row
    if r.state != PENDING or r.not_before <= c.now or r.waiting:
        return []
    if not r.errors and not r.attempts:
        if r.burst_at is not None:
            return []  # its quiet window: ``coalescing`` says so
        return [NotDue(summary=f"not due until {from_now(r.not_before - c.now)} (no error recorded: "
                               "not a retry)", until=r.not_before)]
    err = last_error(r)
    return [Backoff(summary=(f"backing off after attempt {r.attempts} of "
                             f"{c.settings.worker.max_attempts}: due again "
                             f"{from_now(r.not_before - c.now)}; last error: {err or 'none recorded'}"),
                    until=r.not_before, after_attempt=r.attempts, error=err)]
