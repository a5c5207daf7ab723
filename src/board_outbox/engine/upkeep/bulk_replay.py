"""Bulk actions by filter, as a plan: ``plan_bulk_replay`` counts what a filter takes (the dry
run: reads only), ``apply_bulk`` applies one action to it, rate-limited, abortable at any point
with nothing half-done, audited. ``apply_bulk_replay`` is the dead-letters' replay; the cancel of
pending rows and the rerun of done ones (A8) are ``engine/upkeep/bulk_actions.py``'s.

Both walk the filter's state the same way: pages of the store's rows in that state
(``EffectOutbox.failed_page``, ``state_page``: one bounded query a page), each row checked
against what the store cannot answer (``model.dead_letters.wants``: the bot, the last error, a
rerun's one-shot rows and rows already re-run, which the plan counts apart). A document that
does not decode costs only itself: counted, named, never touched.

A cancel with ``include_expired`` also takes the claimed rows whose lease had ended when the
plan was read (``dead_letters.lease_expired``: the reclaim's test). Claimed rows are few -- at
most what the replicas have in flight -- so they are one read (``EffectOutbox.search`` of the
claimed state: Mongo, the ``claimed_lease_until`` partial index, never the history), checked
here against the whole filter; the plan counts them apart (``BulkPlan.expired``).

The apply takes the rows the plan counted: the same filter, bounded by the newest row the plan
took, at most as many rows (of a cancel's claimed rows, those whose lease had ended at the
plan's time, at most as many as it counted). Each replay is one fenced write
(``EffectOutbox.apply_failed`` on ``{row_key, state: failed, updated_at as read}``, the
``replay`` transition: pending, attempts 0, an audit entry naming the bulk replay), so a row
replayed by another operator, or changed in any way since it was read, is skipped, never
replayed twice. One write is atomic and runs shielded from cancellation: an abort (``Stop``, or
the caller's cancellation) lands between two rows, and every planned row is then replayed or
untouched, as the progress counts say."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import msgspec

from board_outbox.model import transitions as T
from board_outbox.model.bad_documents import cap
from board_outbox.model.clock import Clock
from board_outbox.model.codec import unreadable
from board_outbox.model.dead_letters import (
    ABORTED,
    ACTION_STATES,
    FAILED_RUN,
    NAMED_UNREADABLE,
    REPLAY,
    RUN_DONE,
    BulkFilter,
    BulkPlan,
    BulkProgress,
    already_rerun,
    lease_expired,
    wants,
)
from board_outbox.model.errors import StoreError, StoreUnavailable
from board_outbox.model.records import FailedPage, RowFilter
from board_outbox.model.rows import CLAIMED, DONE, FAILED, EffectRow
from board_outbox.model.search import MAX_FIND, RowQuery
from board_outbox.ports import EffectOutbox, SubscriptionStore

log = logging.getLogger("board_outbox.bulk_replay")

PLAN_PAGE = 500  # documents a plan's query reads
APPLY_PAGE = 100  # ... and an apply's (a page lasts APPLY_PAGE / rate seconds)
DEFAULT_RATE = 50.0  # rows replayed a second unless told otherwise
CLAIMED_READ = MAX_FIND  # claimed rows a cancel with include_expired reads (in-flight rows)

Sleep = Callable[[float], Awaitable[None]]
# one row's write of a bulk action: True, moved; False, changed since it was read (skipped);
# raises StoreUnavailable (in doubt) or StoreError (refused)
RowWrite = Callable[[EffectRow], Awaitable[bool]]


class Stop:
    """Asks a running apply to stop before its next row (a signal, the console's abort)."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    async def sleep(self, seconds: float) -> None:
        """Sleep, but no longer than until a stop is asked for."""
        with anyio.move_on_after(seconds):
            await self._event.wait()


class Pacer:
    """At most ``rate`` writes a second: a write starts no sooner than ``1 / rate`` after the one
    before (no catching up after a slow page: any window of W seconds holds at most W * rate + 1
    writes)."""

    def __init__(self, rate: float, clock: Clock) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be > 0 rows a second, not {rate}")
        self.gap = 1.0 / rate
        self.clock = clock
        self.next_at: float | None = None

    def delay(self) -> float:
        """Seconds to wait before the next write."""
        return 0.0 if self.next_at is None else max(0.0, self.next_at - self.clock.now())

    def wrote(self) -> None:
        now = self.clock.now()
        self.next_at = max(now, self.next_at or now) + self.gap


class Looked(msgspec.Struct, frozen=True):
    """What a page's subscriptions say to ``wants``: subscription id -> bot, and the one-shot
    (consume_labels) subscriptions."""

    bots: dict[str, str]
    one_shot: frozenset[str]


async def _looked(subs: SubscriptionStore, flt: BulkFilter, rows: list[EffectRow]) -> Looked:
    """The page's subscriptions, read only when the filter names a bot or a rerun must leave
    the one-shot rows alone (one ``get_many`` a page; a deleted subscription has no bot: its
    rows do not match)."""
    if flt.bot is None and (flt.state != DONE or flt.include_one_shot):
        return Looked({}, frozenset())
    ids = {r.sub_id for r in rows if r.sub_id is not None}
    got = await subs.get_many(ids) if ids else {}
    return Looked({sid: s.bot for sid, s in got.items()},
                  frozenset(sid for sid, s in got.items() if s.consume_labels))


async def _pages(outbox: EffectOutbox, flt: BulkFilter, page: int,
                 upto: float | None = None) -> AsyncIterator[FailedPage]:
    store = flt.store_filter(page, upto=upto)
    walk = outbox.failed_page if flt.state == FAILED else outbox.state_page
    after = None
    while True:
        got = await walk(store, after)
        yield got
        if got.read < page:
            return
        after = got.after


async def plan_bulk_replay(outbox: EffectOutbox, subs: SubscriptionStore, flt: BulkFilter, *,
                           clock: Clock, page: int = PLAN_PAGE,
                           max_read: int | None = None) -> BulkPlan:
    """The dry run: what ``flt`` takes, counted by tenant, kind and subscription. Reads only.
    ``max_read``: stop after reading that many documents (a console page's bound, for a filter
    the store cannot answer: a bot, an error), the plan then covering the rows read."""
    action = next((a for a, st in ACTION_STATES.items() if st == flt.state), REPLAY)
    plan = BulkPlan(filter=flt, planned_at=clock.now(), action=action)
    # a rerun's filter without what it leaves out (the rows it counts apart)
    every_done = msgspec.structs.replace(flt, include_one_shot=True, include_rerun=True)
    async for got in _pages(outbox, flt, page):
        if max_read is not None and plan.read >= max_read:
            plan.truncated = plan.read_capped = True
            return plan
        plan.read += got.read
        plan.unreadable += len(got.unreadable)
        room = NAMED_UNREADABLE - len(plan.unreadable_keys)
        plan.unreadable_keys += got.unreadable[:max(0, room)]
        looked = await _looked(subs, flt, got.rows)
        for row in got.rows:
            if not wants(flt, row, looked.bots, looked.one_shot):
                if flt.state == DONE and wants(every_done, row, looked.bots):
                    # left out for being re-run already, or else one-shot: counted as such
                    if not flt.include_rerun and already_rerun(row):
                        plan.already_rerun += 1
                    else:
                        plan.one_shot += 1
                continue
            if plan.matched >= flt.limit:
                plan.truncated = True
                return plan
            plan.count(row)
    if flt.include_expired:
        claimed = await _claimed(outbox, subs, flt, at=plan.planned_at)
        plan.read += claimed.read
        plan.unreadable += len(claimed.unreadable)
        room = NAMED_UNREADABLE - len(plan.unreadable_keys)
        plan.unreadable_keys += claimed.unreadable[:max(0, room)]
        plan.live, plan.claimed_capped = claimed.live, claimed.capped
        for row in claimed.expired:
            if plan.matched >= flt.limit:
                plan.truncated = True
                return plan
            plan.count(row)
    return plan


class Claimed(msgspec.Struct):
    """The claimed rows a cancel with ``include_expired`` read: those matching the filter whose
    lease had ended (oldest changed first), how many matched under a live lease, the documents
    that did not decode, and whether the read was full (more claimed rows than it holds)."""

    expired: list[EffectRow]
    live: int
    read: int
    unreadable: list[str]
    capped: bool


async def _claimed(outbox: EffectOutbox, subs: SubscriptionStore, flt: BulkFilter, *,
                   at: float, upto: float | None = None) -> Claimed:
    """The claimed rows ``flt`` takes whose lease ended at or before ``at``: one read of the
    claimed state (of the filter's tenant), the rest of the filter checked on each row;
    ``upto``: last changed at or before it as well (the apply's bound)."""
    with unreadable() as bad:
        got = await outbox.search(RowQuery(form="state", state=CLAIMED, tenant=flt.tenant,
                                           limit=CLAIMED_READ))
    store = flt.store_filter(CLAIMED_READ, upto=upto)
    rows = [r for r in got if _stored_match(store, r)]
    as_claimed = msgspec.structs.replace(flt, state=CLAIMED)
    looked = await _looked(subs, as_claimed, rows)
    matching = [r for r in rows if wants(as_claimed, r, looked.bots, looked.one_shot)]
    expired = sorted((r for r in matching if lease_expired(r, at)),
                     key=lambda r: (r.updated_at, r.row_key))
    return Claimed(expired=expired, live=len(matching) - len(expired),
                   read=len(got) + len(bad), unreadable=[str(e.ref) for e in bad],
                   capped=len(got) + len(bad) >= CLAIMED_READ)


def _stored_match(store: RowFilter, row: EffectRow) -> bool:
    """The part of a filter the walks leave to the store (kind, subscription, last changed),
    checked on a row read otherwise."""
    return ((store.kind is None or row.kind == store.kind)
            and (not store.sub_ids or row.sub_id in store.sub_ids)
            and (store.updated_after is None or row.updated_at >= store.updated_after)
            and (store.updated_before is None or row.updated_at < store.updated_before))


def replay_write(outbox: EffectOutbox, *, bulk_id: str, by: str, clock: Clock) -> RowWrite:
    """One fenced ``replay`` of a dead-letter (``apply_failed`` on the ``updated_at`` read),
    audited as this bulk replay's."""
    detail = f"attempts reset (bulk replay {bulk_id})"

    async def replay(row: EffectRow) -> bool:
        t = T.replay(now=clock.now(), by=by, detail=detail)
        return await outbox.apply_failed(row.row_key, t, updated_at=row.updated_at)

    return replay


async def apply_bulk_replay(
    outbox: EffectOutbox, subs: SubscriptionStore, plan: BulkPlan, *, bulk_id: str, by: str,
    clock: Clock, rate: float, stop: Stop | None = None, sleep: Sleep | None = None,
    page: int = APPLY_PAGE, progress: BulkProgress | None = None,
    on_progress: Callable[[BulkProgress], None] | None = None,
) -> BulkProgress:
    """Replay the dead-letters ``plan`` counted (``apply_bulk`` with ``replay_write``)."""
    replay = replay_write(outbox, bulk_id=bulk_id, by=by, clock=clock)
    return await apply_bulk(outbox, subs, plan, replay, bulk_id=bulk_id, by=by, clock=clock,
                            rate=rate, stop=stop, sleep=sleep, page=page, progress=progress,
                            on_progress=on_progress)


async def apply_bulk(
    outbox: EffectOutbox, subs: SubscriptionStore, plan: BulkPlan, write: RowWrite, *,
    bulk_id: str, by: str, clock: Clock, rate: float, stop: Stop | None = None,
    sleep: Sleep | None = None, page: int = APPLY_PAGE, progress: BulkProgress | None = None,
    on_progress: Callable[[BulkProgress], None] | None = None,
) -> BulkProgress:
    """Apply ``write`` to the rows ``plan`` counted, at most ``rate`` a second, each one fenced
    write. Returns (and keeps ``progress`` updated as it goes: the console reads it while this
    runs) where it stands: done, aborted (``stop``), or failed (the store went away;
    ``in_doubt`` names a write it did not answer). Cancelled, it stops between two rows as
    well. Ends with one summary log line."""
    stop = stop or Stop()
    sleep = sleep or stop.sleep
    flt = plan.filter
    prog = progress or BulkProgress(bulk_id=bulk_id, action=plan.action, by=by,
                                    filter=flt.describe(), planned=plan.matched, rate=rate,
                                    started_at=clock.now())
    pacer = Pacer(rate, clock)
    taken = 0  # matching rows met, each applied, skipped or refused
    try:
        if plan.matched and plan.newest is not None:
            taken = await _apply(outbox, subs, plan, prog, pacer, stop, sleep, page, write,
                                 on_progress=on_progress)
        if prog.state == FAILED_RUN:
            pass
        elif stop.requested and prog.remaining:
            prog.state = ABORTED
        else:
            # every planned row not met was changed since the plan (replayed, parked again,
            # purged): it left the walk's bounds, so the walk never met it
            prog.skipped += max(0, plan.matched - taken)
            prog.state = RUN_DONE
    except BaseException:
        prog.state = ABORTED  # cancelled between two rows: the counts stand
        raise
    finally:
        prog.finished_at = clock.now()
        if on_progress is not None:
            on_progress(prog)
        log.warning("%s (by %s, filter %s, %.6g rows/s)", prog.summary(), by, prog.filter, rate,
                    extra={"bulk_id": bulk_id, "by": by, "action": prog.action,
                           "applied": prog.applied, "skipped": prog.skipped,
                           "refused": prog.refused, "remaining": prog.remaining,
                           "refused_keys": prog.refused_keys[:20]})
    return prog


async def _apply(outbox: EffectOutbox, subs: SubscriptionStore, plan: BulkPlan,
                 prog: BulkProgress, pacer: Pacer, stop: Stop, sleep: Sleep, page: int,
                 write: RowWrite, *,
                 on_progress: Callable[[BulkProgress], None] | None) -> int:
    flt = plan.filter
    taken = 0
    quota = plan.matched - plan.expired  # the rows of the filter's own state
    try:
        if quota > 0:
            async for got in _pages(outbox, flt, page, upto=plan.newest):
                looked = await _looked(subs, flt, got.rows)
                for row in got.rows:
                    if taken >= quota or stop.requested:
                        return taken
                    if not wants(flt, row, looked.bots, looked.one_shot):
                        continue
                    if not await _take(write, row, prog, pacer, stop, sleep, on_progress):
                        return taken + (prog.state == FAILED_RUN)
                    taken += 1
        if plan.expired and flt.include_expired and not stop.requested:
            # the claimed rows whose lease had ended when the plan was read (a row claimed or
            # beaten since holds a lease past that): at most as many as the plan counted
            at = min(plan.planned_at, pacer.clock.now())
            claimed = await _claimed(outbox, subs, flt, at=at, upto=plan.newest)
            for row in claimed.expired[:plan.expired]:
                if stop.requested:
                    break
                if not await _take(write, row, prog, pacer, stop, sleep, on_progress):
                    return taken + (prog.state == FAILED_RUN)
                taken += 1
    except (StoreUnavailable, StoreError) as exc:  # a read: nothing was being written
        prog.state = FAILED_RUN
        prog.error = cap(f"{type(exc).__name__}: {exc}", 300)
    return taken


async def _take(write: RowWrite, row: EffectRow, prog: BulkProgress, pacer: Pacer, stop: Stop,
                sleep: Sleep, on_progress: Callable[[BulkProgress], None] | None) -> bool:
    """Pace, then write one row. False: stop (asked to while pacing, or the store went away:
    ``prog`` says which)."""
    wait = pacer.delay()
    if wait > 0:
        await sleep(wait)
        if stop.requested:
            return False
    await _write_one(write, row, prog, pacer)
    if prog.state == FAILED_RUN:
        return False
    if on_progress is not None:
        on_progress(prog)
    return True


async def _write_one(write: RowWrite, row: EffectRow, prog: BulkProgress, pacer: Pacer) -> None:
    """One fenced write, shielded: once started, its outcome is counted whatever cancels us."""
    with anyio.CancelScope(shield=True):
        try:
            moved = await write(row)
        except StoreUnavailable as exc:  # the write may or may not have landed
            prog.in_doubt = row.row_key
            prog.state = FAILED_RUN
            prog.error = cap(f"store unavailable: {exc}", 300)
            return
        except StoreError as exc:  # the document refused the transition: it stays as it was
            prog.refused += 1
            if len(prog.refused_keys) < NAMED_UNREADABLE:
                prog.refused_keys.append(row.row_key)
            log.warning("bulk %s %s: the store refused %s: %s", prog.action, prog.bulk_id,
                        row.row_key, cap(exc, 300), extra={"row_key": row.row_key})
        else:
            if moved:
                prog.applied += 1
            else:
                prog.skipped += 1
        finally:
            pacer.wrote()
