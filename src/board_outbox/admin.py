"""Operator tools: the dead-letter queue (B1) and projection rebuilds (B3)."""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime

import msgspec

from .clock import Clock
from .domain import EffectRow
from .errors import MalformedDocument
from .ports import CardStore, EffectOutbox, EventLog, RowFilter
from .projection_batch import apply_batch
from .reading import GapTracker, read_batch
from .registry import HandlerRegistry
from .telemetry.metrics import Metrics

log = logging.getLogger("board_outbox.admin")

_REL = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_when(text: str, now: float | None = None) -> float:
    """``2026-12-01``, ``2026-12-01T10:00:00`` (UTC unless an offset is given), ``90m``/``2h``/
    ``7d`` (that long ago), or epoch seconds."""
    now = time.time() if now is None else now
    t = text.strip()
    m = _REL.match(t)
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        value = float(t)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise ValueError(f"{text!r} is not a time: epoch seconds must be a finite number")
        return value
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: use an ISO date/time, an age like 90m, 2h or 7d, "
            "or epoch seconds"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


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
        if await outbox.replay(key, clock.now(), by):
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
    # The tail's reading step and young-gap rule; a one-shot rebuild has seen no gap before, so
    # a gap counts as first seen when the event right after it was written.
    gaps = GapTracker(young_gap_seconds, event_time=True, warn=False)

    def skip_malformed(seq: int, exc: MalformedDocument, head: bool) -> bool:
        res.skipped_malformed += 1
        log.error("rebuild skips a malformed event: %s", exc, extra={"tenant_id": tenant_id, "seq": seq})
        return True

    cursor = 0
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
            await apply_batch(registry, name, tenant_id, snaps)
            res.applied += len(snaps)
        if reading.passed:
            cursor = reading.passed[-1][0]
            if progress is not None:
                progress(cursor, res.head)
            if metrics is not None:
                metrics.rebuild_progress(tenant_id, name, cursor, res.head)
        if reading.young_gap is not None:
            res.stopped_at_gap = reading.young_gap
            break
        if reading.beyond_counter is not None or not reading.passed:
            break  # R2: a poison seq past the counter, or nothing left but non-int seqs
    res.cursor = cursor
    return res
