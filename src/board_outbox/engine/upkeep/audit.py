"""The completeness audit (A1): for the events a tenant's cursor has passed, is every row the tail
owes there, and does every row there belong to a real event (and a launch row to a real
subscription)?

One audited chunk costs a constant number of store queries, whatever its size: the events (one
``read_after``), their cards (one ``get_many``), the rows in the chunk's seq range (one
``rows_between``), the tenant's subscriptions (one ``list_for_tenant``). ``--repair`` adds one
bulk upsert.

- **expected rows**: the tail's own rule, replayed now (``Tail.build_rows`` on the events as the
  reading step normalizes them today): one row per enabled projection for every event that
  still reads. An event whose card is gone today, or that no longer decodes, is not expected to
  have rows (the tail skips such events too) and its existing rows are not orphans.
- **missing vs expired**: settled rows expire after their retention (``[retention]``, O8: done
  and coalesced rows 7 days after ``done_at`` by default, dead-letters only when configured),
  and a row settles after its event was inserted, so a row can only have expired if its event is
  older than the shortest retention (``retention_seconds``). A row owed for an event younger
  than that (by the event's ``at``) is **missing**; one owed for an older event (or one with no
  ``at``) is counted as **presumably expired** and never repaired (re-creating it could run its
  effect again).
- **orphans**: a row whose seq has no event in the log ("no event"), a launch row whose
  subscription does not exist or belongs to another tenant ("no subscription"), a projection row
  of a projection that is not enabled ("projection not enabled"). Orphans are reported only.
- **repair**: the missing rows are rebuilt with ``Tail.build_rows`` and written with the tail's
  ``$setOnInsert`` bulk upsert keyed by row key: running it twice, or racing the tail, writes each
  row once. A write the store does not finish in time is split and retried (``_write``), so a
  long log is repaired in one run, however slow the store.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence

import anyio
import msgspec
from opentelemetry import trace

from board_outbox.engine.tail.reading import GapTracker, read_batch
from board_outbox.engine.tail.tail import Tail
from board_outbox.model.board import EventSnapshot
from board_outbox.model.bounds import Pos, PosInt
from board_outbox.model.errors import MalformedDocument, StoreUnavailable
from board_outbox.model.ids import PROJECTION
from board_outbox.model.rows import DONE_TTL_SECONDS, EffectRow
from board_outbox.model.subscriptions import SubscriptionIndex
from board_outbox.model.validation import is_seq

log = logging.getLogger("board_outbox.audit")

SPAN_REPAIR = "board_outbox.audit.repair"
MISSING_KEYS_KEPT = 10_000  # per tenant, by the background audit (the gauge counts at most this)
REPAIR_TRIES = 3  # a single row's repair write, before the store's error ends the repair
REPAIR_RETRY_SECONDS = 0.5


class AuditSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The background audit's settings (the ``[audit]`` configuration section)."""

    enabled: bool = True
    interval_seconds: Pos = 30.0
    # events audited per pass, across the replica's tenants: what bounds the audit's cost
    batch_events: PosInt = 500
    # tenants the sweep over older events visits per pass at most (each visit is at least five
    # reads): keeps an idle replica's audit at a constant cost whatever the tenant count (two:
    # ten reads a pass, a third of a request a second at the default interval)
    sweep_tenants_per_pass: PosInt = 2


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    row_key: str
    kind: str
    reason: str


class AuditReport(msgspec.Struct, kw_only=True):
    tenant_id: str
    after: int  # audited seqs after this one ...
    upto: int  # ... up to and including this one (never past the cursor)
    cursor: int
    events: int = 0  # events read in the range
    rows_checked: int = 0
    missing: list[Finding] = msgspec.field(default_factory=list)
    orphaned: list[Finding] = msgspec.field(default_factory=list)
    presumed_expired: int = 0
    unreadable_events: int = 0  # a card gone today, or an event that does not decode: no rows owed
    repaired: int = 0
    complete: bool = True  # False: stopped at ``max_events`` before the cursor


class Chunk(msgspec.Struct, frozen=True, kw_only=True):
    """Seqs ``(lo, hi]`` of a tenant's log and the events read there (``hi`` <= the cursor)."""

    lo: int
    hi: int
    passed: list[tuple[int, EventSnapshot | None]]
    now: float


async def passed_chunks(tail: Tail, tenant_id: str, *, after: int, cursor: int, batch_size: int,
                        max_events: int | None = None) -> AsyncIterator[Chunk]:
    """The events in ``(after, cursor]`` read as the tail reads them (the reading step, one
    ``read_after`` and one ``get_many`` per chunk), in chunks of at most ``batch_size`` events,
    at most ``max_events`` in all. Every gap below the cursor was passed: none is young. An
    event that no longer decodes (or whose card is gone) comes as ``(seq, None)``."""
    gaps = GapTracker(0.0, warn=False)
    pos, seen = after, 0
    while pos < cursor:
        budget = batch_size if max_events is None else min(batch_size, max_events - seen)
        if budget <= 0:
            return
        now = tail.clock.now()

        def unreadable(_seq: int, _exc: MalformedDocument, _head: bool) -> bool:
            return True  # no rows are owed for it: step over it (as the tail's poison rule did)

        reading = await read_batch(events=tail.events, cards=tail.cards, tenant_id=tenant_id,
                                   after=pos, limit=budget, gaps=gaps, now=now,
                                   on_malformed=unreadable)
        passed = [(seq, snap) for seq, snap in reading.passed if seq <= cursor]
        # the log up to the cursor is exhausted: this chunk reaches the cursor (rows there whose
        # event is gone from the log are orphans too). A short read is not the end (a backend
        # may read a bounded seq window: ``EventLog.read_after``); an empty one is.
        exhausted = not passed or len(passed) < len(reading.passed)
        hi = cursor if exhausted else passed[-1][0]
        seen += len(passed)
        yield Chunk(lo=pos, hi=hi, passed=passed, now=now)
        pos = hi


class Auditor:
    """Audits through the tail's ports and rules (its projections, its row construction)."""

    def __init__(self, tail: Tail, *, retention_seconds: float = float(DONE_TTL_SECONDS),
                 batch_size: int = 500, tracer_provider: trace.TracerProvider | None = None,
                 progress: Callable[[AuditReport], None] | None = None) -> None:
        self.tail = tail
        self.progress = progress  # called after each chunk with the report so far
        # the shortest time a settled row is kept (``Retention.horizon``): past it, presumed expired
        self.retention_seconds = retention_seconds
        self.batch_size = batch_size
        self._tracer = trace.get_tracer("board_outbox.audit", tracer_provider=tracer_provider)

    async def audit(self, tenant_id: str, *, after: int = 0, max_events: int | None = None,
                    repair: bool = False, upto: int | None = None) -> AuditReport:
        """Audit the events in ``(after, cursor]`` (at most ``max_events`` of them; never past
        ``upto``)."""
        t = self.tail
        cursor = await t.cursors.get(tenant_id)
        cursor = cursor if cursor is not None and is_seq(cursor) else 0
        if upto is not None:
            cursor = min(cursor, upto)
        rep = AuditReport(tenant_id=tenant_id, after=after, upto=after, cursor=cursor)
        if cursor <= after:
            return rep
        subs = {s.sub_id for s in await t.subs.list_for_tenant(tenant_id)}
        async for chunk in passed_chunks(t, tenant_id, after=after, cursor=cursor,
                                         batch_size=self.batch_size, max_events=max_events):
            await self._chunk(rep, tenant_id, chunk.lo, chunk.hi, chunk.passed, subs, chunk.now,
                              repair)
            rep.upto = chunk.hi
            if self.progress is not None:
                self.progress(rep)
        rep.complete = rep.upto >= cursor
        return rep

    async def _chunk(self, rep: AuditReport, tenant_id: str, lo: int, hi: int,
                     passed: Sequence[tuple[int, EventSnapshot | None]],
                     subs: Collection[str], now: float, repair: bool) -> None:
        t = self.tail
        rep.events += len(passed)
        seqs = {seq for seq, _ in passed}
        snaps = [snap for _, snap in passed if snap is not None]
        rep.unreadable_events += len(passed) - len(snaps)
        rows = await t.outbox.rows_between(tenant_id, lo, hi)
        rep.rows_checked += len(rows)
        present = {r.row_key for r in rows}
        enabled = set(t.projections)
        for r in rows:
            reason = None
            if r.seq not in seqs:
                reason = "no event"
            elif r.kind == PROJECTION:
                if r.projection not in enabled:
                    reason = "projection not enabled"
            elif r.sub_id is None or r.sub_id not in subs:
                reason = "no subscription"  # none of this tenant's subscriptions has that id
            if reason is not None:
                rep.orphaned.append(Finding(seq=r.seq, row_key=r.row_key, kind=r.kind, reason=reason))
        # what the tail owes here, by its own construction (launch rows depend on the rules at
        # the time; only the projection rows are owed unconditionally)
        owed = t.build_rows(tenant_id, snaps, SubscriptionIndex([]), now, trace.INVALID_SPAN)
        missing = []
        at = {s.seq: s.at for s in snaps}
        for row in owed:
            if row.row_key in present:
                continue
            age = now - at[row.seq] if at[row.seq] > 0 else float("inf")
            if age >= self.retention_seconds:
                rep.presumed_expired += 1
                continue
            missing.append(row)
            rep.missing.append(Finding(seq=row.seq, row_key=row.row_key, kind=row.kind,
                                       reason="missing"))
        if repair and missing:
            rep.repaired += await self._repair(tenant_id, [s for s in snaps
                                                           if s.seq in {r.seq for r in missing}],
                                               {r.row_key for r in missing}, now)

    async def _repair(self, tenant_id: str, snaps: list[EventSnapshot], keys: set[str],
                      now: float) -> int:
        t = self.tail
        with self._tracer.start_as_current_span(
                SPAN_REPAIR, attributes={"board_outbox.tenant_id": tenant_id}) as span:
            rows = [r for r in t.build_rows(tenant_id, snaps, SubscriptionIndex([]), now, span)
                    if r.row_key in keys]
            inserted, existing = await self._write(rows, REPAIR_TRIES)
        log.warning("audit repaired %d missing rows (%d were back already)", inserted,
                    existing, extra={"tenant_id": tenant_id})
        return inserted

    async def _write(self, rows: list[EffectRow], tries: int) -> tuple[int, int]:
        """The repair's bulk upsert, (inserted, existing). A write the store does not finish in
        time (``StoreUnavailable``: a long log's chunk past the operation timeout) is split in
        halves, down to single rows, each retried ``REPAIR_TRIES`` times, so a slow store slows
        a repair down instead of ending it. Safe to repeat: the upsert only inserts a row key
        not stored yet (a timed-out write that landed counts its rows as existing)."""
        try:
            result = await self.tail.outbox.upsert_rows(rows)
            return result.inserted, result.existing
        except StoreUnavailable:
            if len(rows) > 1:
                half = len(rows) // 2
                a, b = await self._write(rows[:half], tries), await self._write(rows[half:], tries)
                return a[0] + b[0], a[1] + b[1]
            if tries <= 1:
                raise
        await anyio.sleep(REPAIR_RETRY_SECONDS)
        return await self._write(rows, tries - 1)


class BackgroundAudit:
    """The service's bounded, incremental audit. Each pass audits at most ``batch_events`` events
    in all, across the tenants it is given: first the events each cursor passed since the last
    pass (a tenant whose cursor did not move costs nothing), then, with what is left, a sweep
    over the older log, one tenant after the other, each from seq 1 up to what the head audit
    reached, so a row deleted long after its event was audited is found too. Rows found missing
    are re-checked every pass (one ``existing_keys`` query per tenant that has some), so a
    repaired row stops counting."""

    def __init__(self, auditor: Auditor, settings: AuditSettings) -> None:
        self.auditor = auditor
        self.settings = settings
        self.head: dict[str, int] = {}  # tenant -> seq the head audit reached
        self.sweep: dict[str, int] = {}  # tenant -> seq the sweep reached (0: not started)
        self.sweeping: str | None = None  # the tenant the sweep is on
        self.missing: dict[str, dict[str, int]] = {}  # tenant -> row key -> seq
        self.events_audited = 0

    def missing_rows(self) -> dict[str, int]:
        return {t: len(keys) for t, keys in sorted(self.missing.items())}

    async def tick(self, cursors: Mapping[str, int]) -> None:
        """One pass over these tenants (tenant -> cursor, as ``CursorStore.all`` reads them)."""
        outbox = self.auditor.tail.outbox
        tenants = sorted(t for t, c in cursors.items() if is_seq(c))
        for tenant in tenants:
            known = self.missing.setdefault(tenant, {})
            if known:
                for key in await outbox.existing_keys(list(known)):
                    known.pop(key, None)
        budget = self.settings.batch_events
        for tenant in tenants:  # 1. the head: events passed since the last pass
            head = self.head.get(tenant, 0)
            if budget <= 0:
                break
            if cursors[tenant] <= head:
                continue
            rep = await self.auditor.audit(tenant, after=head, max_events=budget,
                                           upto=cursors[tenant])
            self._found(tenant, rep)
            self.head[tenant] = rep.upto
            budget -= max(1, rep.events)
        order = [t for t in tenants if self.head.get(t, 0) > 0]
        if not order or budget <= 0:
            return
        i = order.index(self.sweeping) if self.sweeping in order else 0
        for _ in range(min(len(order), self.settings.sweep_tenants_per_pass)):  # 2. the sweep
            tenant = order[i % len(order)]
            rep = await self.auditor.audit(tenant, after=self.sweep.get(tenant, 0),
                                           max_events=budget, upto=self.head[tenant])
            self._found(tenant, rep)
            budget -= max(1, rep.events)
            if rep.upto < self.head[tenant]:
                self.sweep[tenant] = rep.upto  # out of budget: carry on here next pass
                break
            self.sweep[tenant] = 0  # swept up to the head: the next tenant's turn
            i += 1
            if budget <= 0:
                break
        self.sweeping = order[i % len(order)]

    def _found(self, tenant: str, rep: AuditReport) -> None:
        self.events_audited += rep.events
        known = self.missing.setdefault(tenant, {})
        fresh = [f for f in rep.missing if f.row_key not in known]
        for f in fresh:
            if len(known) < MISSING_KEYS_KEPT:
                known[f.row_key] = f.seq
        if fresh:
            log.error("audit: %d rows missing for events the cursor passed (first: %s); "
                      "`board-outbox audit --tenant %s --repair` re-materializes them",
                      len(fresh), fresh[0].row_key, tenant, extra={"tenant_id": tenant})
