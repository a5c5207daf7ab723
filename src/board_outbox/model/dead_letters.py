"""Which rows a bulk action takes -- a replay of dead-letters, a cancel of pending rows, a rerun
of done ones (A8) -- and what its plan and its progress say: plain values and pure rules (the
walk over the store and the writes are ``engine/upkeep/bulk_replay.py``; the cancel's and the rerun's
writes ``engine/upkeep/bulk_actions.py``).

A ``BulkFilter`` is split in two: the part the store answers over its state's walk
(``store_filter``: the state, tenant, kind, subscription, changed since/before) and the part
checked here on each row read (``wants``: the bot, which the row does not carry, the last error,
a rerun's one-shot rows and the rows already re-run)."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping

import msgspec

from board_outbox.model import times
from board_outbox.model.ids import PROJECTION
from board_outbox.model.records import RowFilter
from board_outbox.model.rows import CLAIMED, DONE, FAILED, PENDING, EffectRow
from board_outbox.model.transitions import RERUN_NOTE

# rows one bulk replay takes unless its filter says otherwise (``limit=``)
DEFAULT_BULK_LIMIT = 10_000
# unreadable row keys a plan names (it counts them all)
NAMED_UNREADABLE = 10

_CLASS = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*):")


# the bulk actions, by the state of the rows each takes
REPLAY, CANCEL, RERUN = "replay", "cancel", "rerun"
ACTION_STATES = {REPLAY: FAILED, CANCEL: PENDING, RERUN: DONE}
# what a plan calls one row of each state, and the past tense of each action
NOUNS = {FAILED: "dead-letter", PENDING: "pending row", DONE: "done row"}
DONE_WORDS = {REPLAY: "replayed", CANCEL: "cancelled", RERUN: "re-run"}


class BulkFilter(msgspec.Struct, frozen=True, kw_only=True):
    """The rows a bulk action takes: every given field must hold (None: any). ``state``: the
    rows' state, which the action implies (failed for a replay)."""

    tenant: str | None = None
    kind: str | None = None
    subscription: str | None = None
    bot: str | None = None  # the bot of the row's subscription (looked up as the walk reads)
    error: str | None = None  # a substring of the last error, case-insensitive
    error_class: str | None = None  # the last error's class (``last_error_class``)
    since: float | None = None  # parked at or after (epoch seconds)
    before: float | None = None  # parked before
    limit: int = DEFAULT_BULK_LIMIT  # at most this many rows, the oldest parked first
    state: str = FAILED
    # a rerun: take the rows of one-shot (consume_labels) subscriptions too (their labels were
    # spent by the first run: a rerun would launch without them)
    include_one_shot: bool = False
    # a rerun: take the rows already re-run too (``already_rerun``: a second rerun of each,
    # ``/rerun/2``...); without it a rerun repeated after a crash or a kill re-runs only the rows
    # the first one did not reach
    include_rerun: bool = False
    # a cancel: take the claimed rows whose lease had expired when read too (their holder is
    # presumed dead, as when a replica reclaims an expired lease); never a claimed row otherwise
    include_expired: bool = False

    def store_filter(self, page: int, *, upto: float | None = None) -> RowFilter:
        """What the store answers over the failed rows' index, ``page`` rows a query; ``upto``:
        parked at or before it as well (a plan's newest row: what the apply may take)."""
        before = self.before
        if upto is not None:
            bound = math.nextafter(upto, math.inf)  # RowFilter's bound is exclusive
            before = bound if before is None else min(before, bound)
        return RowFilter(tenant_id=self.tenant, states=(self.state,), kind=self.kind,
                         sub_ids=() if self.subscription is None else (self.subscription,),
                         updated_after=self.since, updated_before=before, limit=page)

    def describe(self) -> str:
        """The filter as ``key=value`` terms (what ``--filter`` takes)."""
        def when(t: float) -> str:
            return times.when(t, fmt="%Y-%m-%dT%H:%M:%SZ")

        terms = [f"{k}={v}" for k, v in (
            ("tenant", self.tenant), ("kind", self.kind), ("subscription", self.subscription),
            ("bot", self.bot), ("error", self.error), ("error-class", self.error_class),
            ("since", None if self.since is None else when(self.since)),
            ("before", None if self.before is None else when(self.before))) if v is not None]
        if self.include_one_shot:
            terms.append("include-one-shot")
        if self.include_rerun:
            terms.append("include-rerun")
        if self.include_expired:
            terms.append("include-expired")
        return " ".join([*terms, f"limit={self.limit}"])


def last_error_class(row: EffectRow) -> str | None:
    """The class of the row's last error: the exception's name the worker wrote before the
    message (``LaunchFailed: ...``), else the entry's kind (``lease_expired``); None: no error."""
    if not row.errors:
        return None
    last = row.errors[-1]
    m = _CLASS.match(last.error)
    return m.group(1) if m else last.kind


def lease_expired(row: EffectRow, at: float) -> bool:
    """Is ``row`` claimed under a lease that ended at or before ``at``? (What a cancel with
    ``include_expired`` takes beside the pending rows: the same test as the reclaim's.)"""
    return row.state == CLAIMED and row.lease_until is not None and row.lease_until <= at


def already_rerun(row: EffectRow) -> bool:
    """Has the event of the done row ``row`` been re-run already? Its history names a rerun
    (``transitions.rerun_noted``'s entry), or it is a rerun itself (``rerun_of``). A rerun
    leaves such rows out unless ``include_rerun``: repeating a rerun that was killed midway
    then re-runs only the rows it did not reach, and never re-runs its new rows (done by the time
    of the repeat)."""
    return row.rerun_of is not None or any(a.action == RERUN_NOTE for a in row.audit)


def wants(flt: BulkFilter, row: EffectRow, bots: Mapping[str, str],
          one_shot: Collection[str] = ()) -> bool:
    """Does the row pass the checks the store does not make? ``bots``: subscription id -> bot,
    for the rows' subscriptions that still exist (read only when the filter names a bot);
    ``one_shot``: the subscriptions that consume labels (a rerun leaves their rows alone
    unless ``include_one_shot``). A rerun leaves the rows ``already_rerun`` alone unless
    ``include_rerun``."""
    if row.state != flt.state:
        return False
    if flt.state == DONE and not flt.include_one_shot and row.sub_id in one_shot:
        return False
    if flt.state == DONE and not flt.include_rerun and already_rerun(row):
        return False
    if flt.bot is not None and (row.sub_id is None or bots.get(row.sub_id) != flt.bot):
        return False
    if flt.error is not None and not (
            row.errors and flt.error.casefold() in row.errors[-1].error.casefold()):
        return False
    return flt.error_class is None or last_error_class(row) == flt.error_class


def target_of(row: EffectRow) -> str:
    """The row's subscription, or its projection, as a plan counts it."""
    if row.kind == PROJECTION or row.sub_id is None:
        return f"projection {row.projection}" if row.projection else "-"
    return row.sub_id


class BulkPlan(msgspec.Struct, kw_only=True):
    """What a bulk action would take (the dry run): counts by tenant, kind and subscription of
    the matching rows, in the walk's order, up to the filter's limit. ``newest`` bounds the
    apply: a row changed (parked again, deferred...) after the plan was read is not the plan's.
    A cancel with ``include_expired``: ``expired`` of the ``matched`` rows are claimed rows whose
    lease had ended at ``planned_at`` (the rest pending); ``live`` claimed rows matched the
    filter under a lease still running, and are left alone."""

    filter: BulkFilter
    planned_at: float
    action: str = REPLAY
    one_shot: int = 0  # a rerun's rows of one-shot subscriptions, left out (include_one_shot)
    already_rerun: int = 0  # a rerun's rows re-run already, left out (include_rerun)
    matched: int = 0
    by_tenant: dict[str, int] = msgspec.field(default_factory=dict)
    by_kind: dict[str, int] = msgspec.field(default_factory=dict)
    by_subscription: dict[str, int] = msgspec.field(default_factory=dict)
    oldest: float | None = None  # parked time of the oldest matching row
    newest: float | None = None  # ... and of the newest the plan takes
    truncated: bool = False  # the limit (or the read cap) was reached: more rows may match
    read_capped: bool = False  # ... the read cap: the plan covers the documents read
    read: int = 0  # documents the walk read
    unreadable: int = 0  # documents matching the stored fields that do not decode: left alone
    unreadable_keys: list[str] = msgspec.field(default_factory=list)  # the first few
    expired: int = 0  # of ``matched``: claimed rows whose lease had expired (include_expired)
    live: int = 0  # claimed rows the filter matched under a live lease: left alone
    claimed_capped: bool = False  # more claimed rows than one read holds: the rest not read

    @property
    def pending(self) -> int:
        """A cancel's pending rows (``matched`` less the claimed ones)."""
        return self.matched - self.expired

    def count(self, row: EffectRow) -> None:
        self.matched += 1
        if row.state == CLAIMED:
            self.expired += 1
        for counts, key in ((self.by_tenant, row.tenant_id), (self.by_kind, row.kind),
                            (self.by_subscription, target_of(row))):
            counts[key] = counts.get(key, 0) + 1
        self.oldest = row.updated_at if self.oldest is None else min(self.oldest, row.updated_at)
        self.newest = row.updated_at if self.newest is None else max(self.newest, row.updated_at)


RUNNING, RUN_DONE, ABORTED, FAILED_RUN = "running", "done", "aborted", "failed"


class BulkProgress(msgspec.Struct, kw_only=True):
    """Where one bulk action stands. Every planned row is, at any moment, exactly one of:
    applied (a replay's: pending again, attempts 0; a cancel's: cancelled; a rerun's: its new
    row written; each with its audit entry), skipped (changed since the plan -- replayed or
    claimed by someone else, parked again, purged -- so left as it is), refused (the store
    refused the transition: left as it was), or remaining (untouched). ``in_doubt`` names the one
    row whose write the store did not answer (applied or untouched, not known which)."""

    bulk_id: str
    action: str = REPLAY
    by: str
    filter: str
    planned: int
    rate: float
    started_at: float
    applied: int = 0
    skipped: int = 0
    refused: int = 0
    refused_keys: list[str] = msgspec.field(default_factory=list)
    in_doubt: str | None = None
    state: str = RUNNING  # running | done | aborted | failed
    error: str | None = None
    finished_at: float | None = None

    @property
    def replayed(self) -> int:
        """A replay's word for ``applied``."""
        return self.applied

    @property
    def remaining(self) -> int:
        return max(0, self.planned - self.applied - self.skipped - self.refused
                   - (self.in_doubt is not None))

    def summary(self) -> str:
        """The one line a bulk action ends with (and logs)."""
        what = {RUN_DONE: "done", ABORTED: "aborted", FAILED_RUN: "stopped",
                RUNNING: "running"}[self.state]
        did = DONE_WORDS.get(self.action, self.action)
        line = (f"bulk {self.action} {self.bulk_id} {what}: {self.applied} of {self.planned} "
                f"planned rows {did}, {self.skipped} skipped (changed since the plan), "
                f"{self.refused} refused by the store, {self.remaining} left untouched")
        if self.in_doubt is not None:
            line += (f"; 1 in doubt ({self.in_doubt}: {did} or untouched, see "
                     "`board-outbox explain`)")
        if self.error:
            line += f"; {self.error}"
        return line
