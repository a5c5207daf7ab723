"""Batched projection apply (P2): the claimed projection rows of one (tenant, projection) run as
one unit -- one ``apply_many`` (one read-model bulk write) and one fenced ``mark_done_for_claim`` per
(claim_id, outcome) -- instead of an apply and a mark per row.

Safety is the single-row path's: every mark is fenced on ``{state: claimed, claim_id}`` (a row
whose lease was stolen is left alone), and projections converge whatever the order or repeats
(the idempotence contract), so running a row's event again after a crash is harmless. If the
batched apply raises, nothing is marked and every row of the unit runs on its own through
``EffectWorker.execute``: a poison event costs its own row's retries and dead-letter, not its
neighbours'.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import anyio
from opentelemetry import trace

from board_outbox.engine import telemetry
from board_outbox.engine.registry import HandlerRegistry
from board_outbox.model.domain import PROJECTION, EventSnapshot
from board_outbox.model.errors import StoreUnavailable
from board_outbox.ports import Claim

if TYPE_CHECKING:
    from board_outbox.engine.worker import EffectWorker, Outcome

log = logging.getLogger("board_outbox.worker")


def plan(claims: Sequence[Claim], projections: Collection[str], max_attempts: int) -> list[list[Claim]]:
    """Execution units in claim order: each batchable projection row joins the unit of its
    (tenant, projection) -- a claim may span tenants (``tick_any``) -- placed where its first
    row was; every other claim is a unit of its own."""
    units: list[list[Claim]] = []
    groups: dict[tuple[str, str], list[Claim]] = {}
    for c in claims:
        row = c.row
        name = row.projection if row is not None else None
        if (row is not None and name is not None and row.kind == PROJECTION and row.event is not None
                and name in projections and row.tenant_id == c.tenant_id
                and not (c.reclaimed and row.attempts >= max_attempts)):
            group = groups.get((row.tenant_id, name))
            if group is None:
                group = groups[(row.tenant_id, name)] = []
                units.append(group)
            group.append(c)
        else:
            units.append([c])
    return units


async def apply_batch(
    registry: HandlerRegistry, name: str, tenant_id: str, events: Sequence[EventSnapshot]
) -> list[str]:
    """One outcome label per event: ``apply_many`` when the projection has it, else ``apply``
    event by event (the marks are still batched)."""
    many = registry.batch_projection(name)
    if many is not None:
        labels = list(await many.apply_many(tenant_id, events))
    else:
        proj = registry.projection(name)
        labels = [await proj.apply(tenant_id, ev) for ev in events]
    if len(labels) != len(events) or not all(isinstance(x, str) for x in labels):
        raise TypeError(f"projection {name!r}: apply_many must return one str per event")
    return labels


async def execute_batch(w: EffectWorker, claims: Sequence[Claim]) -> list[Outcome]:
    """Run one unit of projection claims (see ``plan``); one outcome per claim."""
    now = w.clock.now()
    outcomes: list[Outcome] = []
    live: list[Claim] = []
    for c in claims:
        if now >= c.lease_until:
            outcomes.append("skipped_expired")  # M8, as in execute
        else:
            live.append(c)
    if len(live) < 2:
        return outcomes + [await w.execute(c) for c in live]
    rows = [c.row for c in live]
    assert all(r is not None and r.event is not None for r in rows)
    name, tenant_id = str(rows[0].projection), live[0].tenant_id  # type: ignore[union-attr]
    spans = [_start_span(w, c) for c in live]
    try:
        labels = await apply_batch(w.registry, name, tenant_id,
                                   [r.event for r in rows])  # type: ignore[union-attr,misc]
    except anyio.get_cancelled_exc_class():
        _end(spans, "cancelled")
        raise
    except Exception as exc:
        _end(spans, "batch_failed")
        log.info("batched apply of %d %s rows failed (%s: %s): each row runs on its own",
                 len(live), name, type(exc).__name__, exc, extra={"tenant_id": tenant_id})
        return outcomes + [await w.execute(c) for c in live]
    done_at = w.clock.now()
    marks: dict[tuple[str, str], list[int]] = {}
    for i, (c, label) in enumerate(zip(live, labels, strict=True)):
        marks.setdefault((c.claim_id, label), []).append(i)
    result: list[Outcome] = ["unrecorded"] * len(live)
    try:
        for (claim_id, label), idx in marks.items():
            lease_until = min(live[i].lease_until for i in idx)
            marked = await _mark_done_many(w, [live[i].ref for i in idx], claim_id, done_at, label,
                                           lease_until, tenant_id)
            if marked is None:
                continue
            for i in idx:
                row = rows[i]
                assert row is not None
                if live[i].ref not in marked:
                    result[i] = "lease_lost"
                    log.warning("lease lost before mark_done (late write was a no-op)",
                                extra={"tenant_id": row.tenant_id, "seq": row.seq, "row_key": row.row_key})
                    continue
                result[i] = "done"
                if w.metrics is not None:
                    w.metrics.row_done(row, done_at)
                if w.on_done is not None:
                    w.on_done(row, label)
    finally:
        for span, label, res in zip(spans, labels, result, strict=True):
            span.set_attribute(telemetry.ATTR_OUTCOME, label if res == "done" else res)
            span.end()
    return outcomes + result


async def _mark_done_many(
    w: EffectWorker, refs: list[Any], claim_id: str, now: float, outcome: str, lease_until: float,
    tenant_id: str,
) -> set[Any] | None:
    """``EffectWorker._mark_done`` for a batch: ride out a store outage while the leases last;
    None: not recorded (the rows run again after their lease)."""
    from board_outbox.engine.worker import MARK_DONE_BACKOFF

    delays = iter(MARK_DONE_BACKOFF)
    while True:
        try:
            return set(await w.outbox.mark_done_for_claim(refs, claim_id, now, outcome))
        except StoreUnavailable as exc:
            delay = next(delays, None)
            if delay is None or w.clock.now() + delay >= lease_until:
                log.error("%d projection effects done but not recorded (%s): they run again after "
                          "their lease", len(refs), exc, extra={"tenant_id": tenant_id})
                return None
            await anyio.sleep(delay)


def _start_span(w: EffectWorker, c: Claim) -> trace.Span:
    row = c.row
    assert row is not None
    parent, links = telemetry.parent_and_links(row.trace.traceparent if row.trace else None)
    attrs: dict[str, str | int] = {
        telemetry.ATTR_TENANT: row.tenant_id,
        telemetry.ATTR_SEQ: row.seq,
        telemetry.ATTR_KIND: row.kind,
        telemetry.ATTR_ROW_KEY: row.row_key,
        telemetry.ATTR_ATTEMPT: row.attempts + 1,
    }
    return w._tracer.start_span(telemetry.SPAN_EXECUTE, context=parent, links=links, attributes=attrs)


def _end(spans: list[trace.Span], outcome: str) -> None:
    for span in spans:
        span.set_attribute(telemetry.ATTR_OUTCOME, outcome)
        span.end()
