"""The per-tenant tail: board events -> effect rows -> cursor (ADR-094 "Materialization order").

drain_tenant, per batch:
1. read events after the cursor (one query);
2. keep the contiguous prefix: a young seq gap truncates the batch, an old one is a dead
   allocation stepped over with one warning (M7); an undecodable event truncates the batch and,
   once it is at the head for ``poison_ticks`` ticks, is skipped with ONE error log (M11);
3. normalize + match EVERY event (a ``StoreUnavailable`` aborts the batch, cursor untouched;
   ``CardNotFound`` skips the event) (M1);
4. upsert every matched row in one bulk write ($setOnInsert) (M1, M2);
5. compare-and-set the cursor; losing the CAS means another replica won (M1, C4).

Which tenants are drained, and where a tenant's cursor starts, is the other half of ``Tail``:
``TailTenants`` (``tenants.py``), its base.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping, Sequence

from opentelemetry import trace

from board_outbox.engine import telemetry
from board_outbox.engine.flow.pressure import Pressure
from board_outbox.engine.tail.drain import (
    MIN_FAIR_BATCH,
    DrainResult,
    Figures,
    Handoff,
    PoisonTracker,
    TailSettings,
)
from board_outbox.engine.tail.prefetch import StreamEvents
from board_outbox.engine.tail.reading import GapTracker, read_batch
from board_outbox.engine.tail.tenants import TailTenants
from board_outbox.model.bad_documents import OnceLog, cap
from board_outbox.model.board import EventSnapshot
from board_outbox.model.clock import Clock
from board_outbox.model.errors import MalformedDocument, StoreError, StoreUnavailable
from board_outbox.model.rows import EffectRow, new_projection_row, new_subscription_row
from board_outbox.model.subscriptions import SubscriptionIndex
from board_outbox.ports import CardStore, CursorStore, EffectOutbox, EventLog, SubscriptionStore

# the leaf types stay importable from here
__all__ = ["MIN_FAIR_BATCH", "DrainResult", "Handoff", "Tail", "TailSettings"]

log = logging.getLogger("board_outbox.tail")


class Tail(TailTenants):
    def __init__(
        self,
        *,
        events: EventLog,
        cursors: CursorStore,
        outbox: EffectOutbox,
        subs: SubscriptionStore,
        cards: CardStore,
        clock: Clock,
        settings: TailSettings | None = None,
        projections: Sequence[str] = (),
        kinds: Collection[str] | None = None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        self.events = events
        self.cursors = cursors
        self.outbox = outbox
        self.subs = subs
        self.cards = cards
        self.clock = clock
        self.settings = settings or TailSettings()
        # The projection kinds come from the handler registry: one row per event per projection.
        self.projections = tuple(projections)
        # The effect kinds with a registered handler (None: not checked). A subscription naming
        # another kind still gets its rows (durable: they dead-letter with the reason and replay
        # once a handler is deployed), and the tail says so, once per subscription and kind.
        self.kinds = frozenset(kinds) if kinds is not None else None
        self._gaps = GapTracker(self.settings.young_gap_seconds)
        self._poison = PoisonTracker()
        # tenant -> (cursor after our last CAS, subscription index), only within a drain_all pass
        self._backlog: dict[str, tuple[int, SubscriptionIndex]] = {}
        self._in_pass: set[str] = set()
        self._once = OnceLog(log)
        # R1: tenants whose last batch hit a non-transient store error, with the reason (for
        # status and readiness); cleared by the tenant's next clean batch.
        self.stalled: dict[str, str] = {}
        # R2: tenants whose cursor is ahead of their counter -> (cursor, counter): held, not
        # drained, until the cursor is reset (``behind`` checks every poll pass)
        self.cursor_ahead: dict[str, tuple[int, int]] = {}
        self._to_seed: dict[str, int] = {}  # new, idle tenants: seeded at the end of a pass
        # S3: the cursor as our last CAS left it; a stale value only costs a lost CAS (re-read)
        self._known: dict[str, int] = {}
        # the tenants known to exist (the poll net's counters, the start-up tenant list): the
        # change stream leaves out those another member owns (S5)
        self.seen: frozenset[str] = frozenset()
        # what the last poll net read, and when (clock time): the gauges and the series take
        # every tenant's lag from it instead of reading the counters and cursors again (S6)
        self.figures: Figures | None = None
        self._event_seconds = 0.0  # EWMA of one event's share of a batch (F1: sizes batches)
        # the worker the rows go to, born claimed (None: born pending, no room asked)
        self.handoff: Handoff | None = None
        self._rows_per_event: dict[str, float] = {}  # per tenant, from its last batch
        self.pressure: Pressure | None = None  # backpressure: scales the batches (T1)
        # the events the change stream delivered: a batch they cover is not read again
        self.streamed: StreamEvents | None = None
        self._tracer = trace.get_tracer("board_outbox.tail", tracer_provider=tracer_provider)
        # the store-wide epoch (``model/epoch.py``), read once: a ``latest`` seed leaves only the
        # events written at or before it unlaunched
        self.epoch: float | None = None

    async def drain_tenant(self, tenant_id: str) -> DrainResult:
        with telemetry.drain_span(self._tracer, tenant_id) as span:
            res = DrainResult(tenant_id=tenant_id)
            if tenant_id in self.cursor_ahead:
                res.stopped = "cursor_ahead"  # held: draining would skip events silently (R2)
                return res
            started = time.monotonic()
            try:
                await self._drain(tenant_id, res, span)
            except StoreUnavailable as exc:
                if self.pressure is not None:
                    self.pressure.failed(f"{type(exc).__name__}")
                res.stopped, res.error = "aborted", str(exc)
                span.set_attribute(telemetry.ATTR_OUTCOME, "aborted")
                log.warning(
                    "batch aborted, cursor untouched: %s", exc, extra={"tenant_id": tenant_id}
                )
                return res
            except (StoreError, MalformedDocument, ValueError, TypeError, KeyError) as exc:
                # R1: a document this tenant's batch cannot get past (a row over 16 MB, a
                # cursor that is not an int...): this tenant stalls with the reason, the
                # others flow. Logged once per distinct problem.
                reason = cap(f"{type(exc).__name__}: {exc}")
                res.stopped, res.error = "stalled", reason
                span.set_attribute(telemetry.ATTR_OUTCOME, "stalled")
                self.stalled[tenant_id] = reason
                self._once(("stalled", tenant_id, reason), logging.ERROR,
                           "tenant stalled, cursor untouched: %s", reason,
                           extra={"tenant_id": tenant_id})
                return res
            if self.pressure is not None and res.read:
                self.pressure.observe(time.monotonic() - started)
            was = self.stalled.pop(tenant_id, None)
            if was is not None:
                self._once.forget(("stalled", tenant_id, was))  # a relapse is logged again
                log.warning("tenant no longer stalled", extra={"tenant_id": tenant_id})
            span.set_attribute(telemetry.ATTR_OUTCOME, res.stopped or "ok")
            span.set_attribute(telemetry.ATTR_ROWS, res.rows)
            return res

    async def _drain(self, tenant_id: str, res: DrainResult, span: trace.Span) -> None:
        now = self.clock.now()
        # Within one pass over a backlog, the next batch starts where our own CAS left the
        # cursor and matches against the subscriptions loaded for the first batch: two round
        # trips fewer per batch. Across passes the cursor as our last CAS left it saves the
        # read too (S3). A replica that moved the cursor meanwhile makes our CAS fail (wasted
        # work, nothing wrong); a subscription edited mid-pass is re-verified at execution (M10b).
        backlog = self._backlog.pop(tenant_id, None)
        known = backlog[0] if backlog else self._known.get(tenant_id)
        cursor = known if known is not None else await self.cursor(tenant_id)
        res.cursor_before = res.cursor_after = cursor
        res.limit = self.batch_limit()
        if self.handoff is not None:
            room = self.handoff.room(tenant_id)
            if room <= 0:
                res.stopped = "no_room"  # the worker still holds this tenant's rows
                return
            per_event = self._rows_per_event.get(tenant_id, 1.0 + len(self.projections))
            res.limit = max(1, min(res.limit, int(room / max(per_event, 1.0))))
        started = time.monotonic()
        # the events the change stream delivered, when they are the next ones (a round trip saved);
        # else a read from the store, which may earn the stream's buffer its trust
        buffer, streamed, gen = self.streamed, None, None
        if buffer is not None:
            streamed = buffer.take(tenant_id, cursor, res.limit)
            if streamed is None:
                gen = buffer.begin_read(tenant_id)
        res.streamed = len(streamed or ())
        reading = await read_batch(
            events=self.events, cards=self.cards, tenant_id=tenant_id, after=cursor,
            limit=res.limit, gaps=self._gaps, now=now, records=streamed,
            on_malformed=lambda seq, exc, head: self._skip_poison(tenant_id, seq, exc, head=head, res=res),
        )
        res.read = reading.read
        res.stepped_gaps += reading.stepped_gaps
        res.skipped_deleted += reading.deleted
        if reading.young_gap is not None and not res.stopped:
            res.stopped = "young_gap"
        if reading.beyond_counter is not None and not res.stopped:
            res.stopped = "beyond_counter"
        if not reading.read:
            self._poison.clear(tenant_id)
            self._known.pop(tenant_id, None)  # nothing new: re-read the cursor next time
            if gen is not None and buffer is not None:
                buffer.end_read(tenant_id, gen)  # caught up as of this read
            return
        snapshots = reading.snapshots
        advance_to = reading.passed[-1][0] if reading.passed else cursor
        if advance_to == cursor:
            if not res.stopped:
                res.stopped = "poison"  # nothing passable was read (non-int seqs only)
            return
        if res.stopped != "poison":
            self._poison.clear(tenant_id)

        # Match against the tenant's subscriptions (loaded once per batch), then one bulk
        # upsert, then the CAS.
        index = backlog[1] if backlog else SubscriptionIndex(
            await self.subs.list_for_tenant(tenant_id))
        rows = self.build_rows(tenant_id, snapshots, index, now, span, reading.traces)
        if rows:
            handoff = self.handoff
            terms = None if handoff is None else handoff.terms()
            result = await self.outbox.upsert_rows(rows, claim=terms)
            res.rows, res.rows_inserted, res.claims = len(rows), result.inserted, result.claims
            if handoff is not None and result.claims:
                handoff.receive(result.claims)  # they run while the cursor moves
            if self.kinds is not None:
                res.unhandled = sum(1 for r in rows if r.kind not in self.kinds)
        if snapshots:
            self._rows_per_event[tenant_id] = len(rows) / len(snapshots)
        res.materialized = len(snapshots)
        if res.read >= MIN_FAIR_BATCH:
            per_event = (time.monotonic() - started) / res.read
            self._event_seconds = per_event if self._event_seconds <= 0 else (
                0.7 * self._event_seconds + 0.3 * per_event)
        if await self.cursors.compare_and_set(tenant_id, cursor, advance_to):
            res.cursor_after = self._known[tenant_id] = advance_to
            self._gaps.forget_below(tenant_id, advance_to)
            if gen is not None and buffer is not None and not res.stopped and not self.more_behind(res):
                buffer.end_read(tenant_id, gen)  # it passed all it read, and all there was
            if tenant_id in self._in_pass:
                self._backlog[tenant_id] = (advance_to, index)
        else:
            self._known.pop(tenant_id, None)
            res.stopped = "cas_lost"
            res.cursor_after = await self.cursors.get(tenant_id) or cursor

    def _skip_poison(
        self, tenant_id: str, seq: int, exc: MalformedDocument, *, head: bool, res: DrainResult
    ) -> bool:
        """M11: an unreadable event truncates the batch; once it has been the head of line for
        ``poison_ticks`` ticks it is skipped, with ONE error log. True: skip it now."""
        res.stopped = "poison"
        if not head:
            return False  # materialize what is before it; it is the head next tick
        ticks = self._poison.bump(tenant_id, seq)
        if ticks < self.settings.poison_ticks:
            return False
        self._poison.clear(tenant_id)
        res.skipped_poison += 1
        res.stopped = ""
        log.error("skipping poison event after %d ticks: %s", ticks, exc,
                  extra={"tenant_id": tenant_id, "seq": seq})
        return True

    def build_rows(
        self,
        tenant_id: str,
        snapshots: Sequence[EventSnapshot],
        index: SubscriptionIndex,
        now: float,
        span: trace.Span,
        traces: Mapping[int, object] | None = None,
    ) -> list[EffectRow]:
        # each row stores the trace context its execute spans continue: its event's own span
        # when the producer stored one (``traces``, C7), else this batch span's
        events = telemetry.EventSpans(self._tracer, span, tenant_id, traces)
        projections = self.projections
        rows: list[EffectRow] = []
        add = rows.append
        for snap in snapshots:
            tc, first = events.begin(snap.seq), len(rows)
            for sub in index.matching(snap):
                if self.kinds is not None and sub.kind not in self.kinds:
                    self._unhandled(tenant_id, sub.sub_id, sub.kind)
                add(new_subscription_row(tenant_id, snap, sub, now, tc))
            for proj in projections:
                add(new_projection_row(tenant_id, snap, proj, now, tc))
            events.end(rows, first)
        if span.is_recording():
            if rows:
                # one span event per batch, not per row (cheap): how many rows this batch wrote and the
                # seq range they cover; each row carries this span's context (``trace``), so
                # its execute spans are children of this one and its trace reads end to end
                span.add_event(telemetry.EVENT_ROWS, {
                    telemetry.ATTR_ROWS: len(rows),
                    telemetry.ATTR_SEQ_FIRST: rows[0].seq,
                    telemetry.ATTR_SEQ_LAST: rows[-1].seq,
                })
            if snapshots:
                span.set_attribute(telemetry.ATTR_SEQ, snapshots[-1].seq)
                span.set_attribute(telemetry.MESSAGING_BATCH_COUNT, len(snapshots))
        return rows

    def _unhandled(self, tenant_id: str, sub_id: str, kind: str) -> None:
        self._once(("unhandled", sub_id, kind), logging.ERROR,
                   "subscription %s names effect kind %r, which no handler is registered for: its "
                   "rows are written and dead-lettered (register the kind under [handlers] or the "
                   "board_outbox.handlers entry points, then `dead-letters replay`)",
                   sub_id, kind, extra={"tenant_id": tenant_id, "sub_id": sub_id})

    async def drain_all(
        self, tenants: Sequence[str] | None = None, *, rounds: int | None = None
    ) -> list[DrainResult]:
        """One pass: drain each tenant until it is caught up (or stopped by a gap/poison/error),
        round-robin: one batch of every tenant per round, so one tenant's backlog holds up the
        others' events by one batch, not by the whole backlog (F1). ``rounds`` stops the pass
        after that many rounds; a tenant whose last batch was full (``more_behind``) then has
        more to drain."""
        if tenants is None:
            tenants = sorted(await self.tenants())
        results: list[DrainResult] = []
        todo = list(tenants)
        done_rounds = 0
        try:
            while todo and (rounds is None or done_rounds < rounds):
                done_rounds += 1
                full: list[str] = []
                for tenant in todo:
                    self._in_pass.add(tenant)
                    res = await self.drain_tenant(tenant)
                    results.append(res)
                    if self.more_behind(res):
                        full.append(tenant)
                    else:
                        self._in_pass.discard(tenant)
                        self._backlog.pop(tenant, None)
                todo = full
        finally:
            self._in_pass.clear()
            self._backlog.clear()
        await self.seed_new()
        return results

    def more_behind(self, res: DrainResult) -> bool:
        """Events may be waiting right behind this batch: it was full and nothing stopped it --
        it read its limit, or it passed the limit's worth of seqs (gaps stepped over inside a
        bounded window: ``EventLog.read_after``)."""
        limit = res.limit or self.settings.batch_size
        return res.full and (res.read >= limit or res.cursor_after - res.cursor_before >= limit)

    def batch_limit(self) -> int:
        """Events per batch: ``batch_size``, cut down to what takes about ``batch_seconds`` at
        the measured pace (F1), never below ``MIN_FAIR_BATCH`` (or ``batch_size`` if smaller);
        then scaled down by backpressure (T1)."""
        s = self.settings
        if self._event_seconds <= 0:
            limit = s.batch_size
        else:
            fit = int(s.batch_seconds / self._event_seconds)
            limit = max(min(s.batch_size, MIN_FAIR_BATCH), min(s.batch_size, fit))
        return limit if self.pressure is None else self.pressure.scale(limit)
