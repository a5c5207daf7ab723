"""Batched projection apply (P2): the claimed projection rows of one (tenant, projection) run as
one unit -- one ``apply_many`` (one read-model bulk write) and one fenced done mark per
(claim_id, outcome) through the completer -- instead of an apply and a mark per row.

Safety is the single-row path's: every mark is fenced on ``{state: claimed, claim_id}`` (a row
whose lease was stolen is left alone), and projections converge whatever the order or repeats
(the idempotence contract), so running a row's event again after a crash is harmless. If the
batched apply raises, nothing is marked and every row of the unit runs on its own (the worker's
``execute``): a poison event costs its own row's retries and dead-letter, not its neighbours'.

The unit only chooses each row's outcome; the completer writes it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from contextlib import AbstractContextManager

import anyio
from opentelemetry import trace

from board_outbox.engine import telemetry
from board_outbox.engine.completer import Completer
from board_outbox.engine.outcomes import Outcome
from board_outbox.engine.registry import HandlerRegistry
from board_outbox.engine.watchdog import LoopWatch, deadline
from board_outbox.model.clock import Clock
from board_outbox.model.domain import PROJECTION, EventSnapshot
from board_outbox.ports import Claim

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
                and row.attempts < max_attempts):
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


class BatchUnit:
    """Runs one unit of projection claims (see ``plan``). ``execute_one`` runs a claim on its own
    (the worker's ``execute``): for a unit that shrank to one live row, and after a failed
    batched apply."""

    def __init__(
        self, *, registry: HandlerRegistry, clock: Clock, completer: Completer,
        tracer: trace.Tracer, execute_one: Callable[[Claim], Awaitable[Outcome]],
        watch: LoopWatch, max_seconds: float,
        in_flight: Callable[[Sequence[Claim]], AbstractContextManager[None]],
    ) -> None:
        self.registry = registry
        self.clock = clock
        self.completer = completer
        self.tracer = tracer
        self.execute_one = execute_one
        self.watch = watch
        self.max_seconds = max_seconds  # each batched apply's deadline (max_execution_seconds)
        self.in_flight = in_flight  # the worker's heartbeat keeps these claims' leases meanwhile

    async def run(self, claims: Sequence[Claim]) -> list[Outcome]:
        """One outcome per claim."""
        now = self.clock.now()
        outcomes: list[Outcome] = []
        live: list[Claim] = []
        for c in claims:
            if now >= c.lease_until:
                outcomes.append("skipped_expired")  # M8, as in execute
            else:
                live.append(c)
        if len(live) < 2:
            return outcomes + [await self.execute_one(c) for c in live]
        rows = [c.row for c in live if c.row is not None]
        events = [r.event for r in rows if r.event is not None]
        assert len(rows) == len(events) == len(live)  # ``plan`` put only such rows in a unit
        name, tenant_id = str(rows[0].projection), live[0].tenant_id
        spans = [telemetry.start_execute_span(self.tracer, r, attempt=r.attempts + 1) for r in rows]
        with self.in_flight(live):
            try:
                what = f"projection {name!r} apply_many ({len(events)} rows of tenant {tenant_id!r})"
                with self.watch.step(what), deadline(self.max_seconds, what):
                    labels = await apply_batch(self.registry, name, tenant_id, events)
            except anyio.get_cancelled_exc_class():
                _end(spans, "cancelled")
                raise
            except Exception as exc:
                _end(spans, "batch_failed")
                log.info("batched apply of %d %s rows failed (%s: %s): each row runs on its own",
                         len(live), name, type(exc).__name__, exc, extra={"tenant_id": tenant_id})
                labels = None
            result: list[Outcome] = ["unrecorded"] * len(live)
            if labels is not None:
                try:
                    self.completer.done_many(live, labels, result)
                finally:
                    for span, label, res in zip(spans, labels, result, strict=True):
                        span.set_attribute(telemetry.ATTR_OUTCOME,
                                           label if res in ("done", "staged") else res)
                        span.end()
        if labels is None:  # outside ``in_flight``: each row then holds its own lease in it
            return outcomes + [await self.execute_one(c) for c in live]
        return outcomes + result


def _end(spans: list[trace.Span], outcome: str) -> None:
    for span in spans:
        span.set_attribute(telemetry.ATTR_OUTCOME, outcome)
        span.end()
