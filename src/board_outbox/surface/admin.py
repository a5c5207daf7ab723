"""Operator tools: the dead-letter queue (B1), projection rebuilds (B3), the shadow diff (A3),
and the helpers of the audit and the replays (A1, A4)."""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import msgspec

from board_outbox.engine.handlers.registry import HandlerRegistry
from board_outbox.engine.tail.reading import GapTracker, read_batch
from board_outbox.engine.tail.tail import Tail, TailSettings
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.engine.work.batch import apply_batch
from board_outbox.model import transitions as T
from board_outbox.model.bad_documents import cap
from board_outbox.model.clock import Clock
from board_outbox.model.errors import (
    MalformedDocument,
    ProjectionFailed,
    StoreError,
    StoreUnavailable,
    SubscriptionNotFound,
)
from board_outbox.model.ids import LAUNCH, PROJECTION
from board_outbox.model.rows import FAILED, EffectRow
from board_outbox.model.subscriptions import matches
from board_outbox.model.times import stamp
from board_outbox.ports import (
    CardStore,
    EffectOutbox,
    EventLog,
    RowFilter,
    Stores,
    SubscriptionStore,
)

log = logging.getLogger("board_outbox.admin")

_REL = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_when(text: str, now: float | None = None) -> float:
    """``2026-12-01``, ``2026-12-01T10:00:00`` (UTC unless an offset is given), ``90m``/``2h``/
    ``7d`` (that long ago), or epoch seconds."""
    now = time.time() if now is None else now
    t = text.strip()
    m = _REL.fullmatch(t)
    if m:
        return _in_range(text, now - float(m.group(1)) * _UNITS[m.group(2)])
    try:
        value = float(t)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise ValueError(f"{text!r} is not a time: epoch seconds must be a finite number")
        return _in_range(text, value)
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: use an ISO date/time, an age like 90m, 2h or 7d, "
            "or epoch seconds"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return _in_range(text, dt.timestamp())


def _in_range(text: str, t: float) -> float:
    """An operator's time bound, held to the stored times' range (R7): no stored time lies
    outside it, and every bound is shown back to the operator."""
    if stamp(t) is None:
        raise ValueError(f"{text!r} is not a time from 1970-01-01 to 9999-12-31 UTC")
    return t


def dead_letter_filter(
    tenant: str | None, since: float | None, until: float | None, limit: int
) -> RowFilter:
    return RowFilter(tenant_id=tenant, states=("failed",), updated_after=since,
                     updated_before=until, limit=limit)


def row_json(row: EffectRow) -> bytes:
    return msgspec.json.format(msgspec.json.encode(row), indent=2)


async def replay_rows(outbox: EffectOutbox, keys: list[str], clock: Clock, by: str) -> list[str]:
    """Replay each failed row; return the keys that were replayed (others were not failed)."""
    done = []
    for key in keys:
        if await outbox.apply_failed(key, T.replay(now=clock.now(), by=by)):
            log.info("replayed dead-letter", extra={"row_key": key})
            done.append(key)
    return done


class RebuildResult(msgspec.Struct, kw_only=True):
    tenant_id: str
    projection: str
    head: int = 0
    cursor: int = 0
    applied: int = 0
    skipped_deleted: int = 0
    skipped_malformed: int = 0
    stepped_gaps: int = 0
    stopped_at_gap: int | None = None


async def rebuild_projection(
    *,
    name: str,
    tenant_id: str,
    registry: HandlerRegistry,
    events: EventLog,
    cards: CardStore,
    clock: Clock,
    young_gap_seconds: float,
    batch_size: int = 1000,
    progress: Callable[[int, int], None] | None = None,
    metrics: Metrics | None = None,
) -> RebuildResult:
    """Reset a projection's read model for one tenant and replay it from seq 0.

    A gap whose next event is younger than ``young_gap_seconds`` may still be filling in: the
    rebuild stops there (the running service's projection rows continue from it) instead of
    stepping over. An older gap is a dead allocation and is stepped over.
    """
    proj = registry.projection(name)  # UnknownEffectKind for a bad name, before any reset
    res = RebuildResult(tenant_id=tenant_id, projection=name)
    res.head = await events.max_inserted_seq(tenant_id)
    await proj.reset(tenant_id)
    await _replay(res, registry=registry, events=events, cards=cards, clock=clock,
                  young_gap_seconds=young_gap_seconds, batch_size=batch_size, after=0,
                  progress=progress, metrics=metrics)
    return res


async def _replay(
    res: RebuildResult, *, registry: HandlerRegistry, events: EventLog, cards: CardStore,
    clock: Clock, young_gap_seconds: float, batch_size: int, after: int,
    progress: Callable[[int, int], None] | None, metrics: Metrics | None,
    saved: Callable[[int], Awaitable[None]] | None = None,
) -> None:
    """The replay loop of both rebuilds: the tail's reading step and young-gap rule, one
    ``apply_batch`` per batch read, from ``after`` until nothing is left or a young gap."""
    name, tenant_id = res.projection, res.tenant_id
    # A one-shot rebuild has seen no gap before, so a gap counts as first seen when the event
    # right after it was written.
    gaps = GapTracker(young_gap_seconds, event_time=True, warn=False)

    def skip_malformed(seq: int, exc: MalformedDocument, head: bool) -> bool:
        res.skipped_malformed += 1
        log.error("rebuild skips a malformed event: %s", exc, extra={"tenant_id": tenant_id, "seq": seq})
        return True

    cursor = after
    res.stopped_at_gap = None
    while True:
        reading = await read_batch(
            events=events, cards=cards, tenant_id=tenant_id, after=cursor, limit=batch_size,
            gaps=gaps, now=clock.now(), on_malformed=skip_malformed,
        )
        if not reading.read:
            break
        res.skipped_deleted += reading.deleted
        res.stepped_gaps += reading.stepped_gaps
        # one apply_many (one read-model bulk write) per batch read, when the projection has it
        snaps = [snap for _seq, snap in reading.passed if snap is not None]
        if snaps:
            try:
                await apply_batch(registry, name, tenant_id, snaps)
            except (StoreUnavailable, StoreError):
                raise  # the store's, not the projection's: a rerun resumes
            except Exception as exc:  # the projection's own code raised: a bug, not bad data
                lo, hi = snaps[0].seq, snaps[-1].seq
                where = f"seq {lo}" if lo == hi else f"seqs {lo}..{hi}"
                raise ProjectionFailed(
                    f"rebuild: projection {name!r} raised {type(exc).__name__} at {where} of "
                    f"{tenant_id}: {cap(str(exc), 300)}") from exc
            res.applied += len(snaps)
        if reading.passed:
            cursor = reading.passed[-1][0]
            if saved is not None:
                await saved(cursor)
            if progress is not None:
                progress(cursor, max(res.head, cursor))
            if metrics is not None:
                metrics.rebuild_progress(tenant_id, name, cursor, max(res.head, cursor))
        if reading.young_gap is not None:
            res.stopped_at_gap = reading.young_gap
            break
        if reading.beyond_counter is not None or not reading.passed:
            break  # R2: a poison seq past the counter, or nothing left but non-int seqs
    res.cursor = cursor


# --- audit, replays (A1, A4) -------------------------------------------------------------------


def tail_for(stores: Stores, registry: HandlerRegistry, settings: TailSettings, clock: Clock) -> Tail:
    """A tail over ``stores`` with the configured projections: what the audit and the replays use
    to know which rows the tail owes (its ``build_rows``), and to write them its way."""
    return Tail(events=stores.events, cursors=stores.cursors, outbox=stores.outbox,
                subs=stores.subs, cards=stores.cards, clock=clock, settings=settings,
                projections=registry.projections)


async def preview_dead_letter(row: EffectRow, subs: SubscriptionStore, registry: HandlerRegistry) -> str:
    """What replaying this dead-letter would do under the current rules, read-only: the launch
    handler's own re-verification (subscription exists, same tenant, still matches), or whether
    a handler serves the row's projection or kind."""
    if row.state != FAILED:
        return f"not a dead-letter ({row.state}): left alone"
    if row.kind == PROJECTION:
        if row.projection in registry.projections:
            return f"would apply the event to projection {row.projection}"
        return f"would park again: projection {row.projection!r} is not enabled"
    if row.kind not in registry.kinds:
        return f"would park again: no handler for kind {row.kind!r}"
    if row.kind != LAUNCH:
        return f"would run kind {row.kind}"
    if row.sub_id is None or row.event is None:
        return "would park again: launch row without sub_id or event"
    try:
        sub = await subs.get(row.sub_id)
    except SubscriptionNotFound:
        return "would be dropped: subscription deleted"
    except MalformedDocument as exc:
        return f"would park again: {exc}"
    if sub.tenant_id != row.tenant_id:
        return f"would park again: subscription {sub.sub_id!r} belongs to tenant {sub.tenant_id!r}"
    if not row.consume_marked and not matches(sub, row.event):
        return "would be dropped: no longer matches the subscription"
    consume = " (consuming " + ", ".join(sub.consume_labels) + ")" if (
        sub.consume_labels and not row.consume_marked) else ""
    return f"would launch bot {sub.bot}{consume}"
