"""Batched projection apply (P2): the claimed projection rows of one projection run as one unit,
across tenants -- each tenant's rows through one ``apply_many`` (the projection's own call, its
events in their order), the tenants side by side with their read-model writes gathered into one
bulk write (``gathered.py``), and one fenced done mark per (claim_id, outcome) through the
completer -- instead of an apply, a write and a mark per row.

Safety is the single-row path's: every mark is fenced on ``{state: claimed, claim_id}`` (a row
whose lease was stolen is left alone), the read models keep the newer event per document (the
store's seq guard), and projections converge whatever the order or repeats (the idempotence
contract), so running a row's event again after a crash is harmless. If a tenant's batched
apply raises, none of its rows is marked and each runs on its own (the worker's ``execute``): a
poison event costs its own row's retries and dead-letter, not its neighbours'; the other
tenants' rows of the unit are marked as they applied.

The unit only chooses each row's outcome; the completer writes it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Hashable, Sequence
from contextlib import AbstractContextManager

import anyio
from opentelemetry import trace

from board_outbox.engine import telemetry
from board_outbox.engine.handlers.registry import HandlerRegistry
from board_outbox.engine.work.completer import Completer
from board_outbox.engine.work.gathered import gathered
from board_outbox.engine.work.outcomes import Outcome
from board_outbox.engine.work.watchdog import LoopWatch, deadline
from board_outbox.model.board import EventSnapshot
from board_outbox.model.clock import Clock
from board_outbox.model.ids import PROJECTION
from board_outbox.ports import Claim

log = logging.getLogger("board_outbox.worker")


def plan(claims: Sequence[Claim], projections: Collection[str], max_attempts: int) -> list[list[Claim]]:
    """Execution units in claim order: each batchable projection row joins the unit of its
    projection -- across the tenants of the claim (``tick_any``), each tenant's rows in their
    claim order -- placed where its first row was; every other claim is a unit of its own."""
    units: list[list[Claim]] = []
    groups: dict[str, list[Claim]] = {}
    for c in claims:
        row = c.row
        name = row.projection if row is not None else None
        if (row is not None and name is not None and row.kind == PROJECTION and row.event is not None
                and name in projections and row.tenant_id == c.tenant_id
                and row.attempts < max_attempts):
            group = groups.get(name)
            if group is None:
                group = groups[name] = []
                units.append(group)
            group.append(c)
        else:
            units.append([c])
    return units


def lane_of(unit: Sequence[Claim]) -> Hashable:
    """The lane a unit runs in (``lanes.py``): its tenant's, or, for a projection's unit (the
    rows of one projection ``plan`` batches across the tenants of a claim), that projection's
    own: it holds up no tenant's other rows, and as the lanes outlive a claim a later claim's
    unit of the projection queues behind an earlier one (the order within each (tenant,
    projection) pair is the units' order). Without projection batching every unit is one row
    and runs in its tenant's lane (``tenant_lane``)."""
    row = unit[0].row
    if len(unit) > 1 or (row is not None and row.kind == PROJECTION):
        return ("projection", row.projection if row is not None else None)
    return unit[0].tenant_id


def tenant_lane(unit: Sequence[Claim]) -> Hashable:
    """The lane of a unit of one row without projection batching: its tenant's."""
    return unit[0].tenant_id


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
        """One outcome per claim, in the order given."""
        now = self.clock.now()
        outcomes: dict[int, Outcome] = {}
        live: list[Claim] = []
        for i, c in enumerate(claims):
            if now >= c.lease_until:
                outcomes[i] = "skipped_expired"  # M8, as in execute
            else:
                live.append(c)
        if len(live) < 2:
            ran = [await self.execute_one(c) for c in live]
            return _in_order(claims, outcomes, dict(zip((id(c) for c in live), ran, strict=True)))
        by_tenant: dict[str, list[Claim]] = {}
        for c in live:
            by_tenant.setdefault(c.tenant_id, []).append(c)
        rows = [c.row for c in live if c.row is not None]
        assert len(rows) == len(live) and all(r.event is not None for r in rows)  # ``plan``
        name = str(rows[0].projection)
        spans = {id(c): telemetry.start_execute_span(self.tracer, c.row, attempt=c.row.attempts + 1)
                 for c in live if c.row is not None}
        alone: list[Claim] = []  # a tenant whose batched apply raised: each row on its own
        result: dict[int, Outcome] = {}
        with self.in_flight(live):
            what = (f"projection {name!r} apply_many ({len(live)} rows of "
                    f"{len(by_tenant)} tenant(s))")
            try:
                with self.watch.step(what), deadline(self.max_seconds, what):
                    applied = await gathered([self._job(name, t, group)
                                              for t, group in by_tenant.items()])
            except anyio.get_cancelled_exc_class():
                _end([spans[id(c)] for c in live], "cancelled")
                raise
            except Exception as exc:  # the deadline: every tenant's rows on their own
                applied = [exc] * len(by_tenant)
            for (tenant_id, group), labels in zip(by_tenant.items(), applied, strict=True):
                if isinstance(labels, Exception):
                    _end([spans[id(c)] for c in group], "batch_failed")
                    log.info("batched apply of %d %s rows failed (%s: %s): each row runs on its "
                             "own", len(group), name, type(labels).__name__, labels,
                             extra={"tenant_id": tenant_id})
                    alone += group
                    continue
                staged: list[Outcome] = ["unrecorded"] * len(group)
                try:
                    self.completer.done_many(group, labels, staged)
                finally:
                    for c, label, res in zip(group, labels, staged, strict=True):
                        span = spans[id(c)]
                        span.set_attribute(telemetry.ATTR_OUTCOME,
                                           label if res in ("done", "staged") else res)
                        span.end()
                        result[id(c)] = res
        for c in alone:  # outside ``in_flight``: each row then holds its own lease in it
            result[id(c)] = await self.execute_one(c)
        return _in_order(claims, outcomes, result)

    def _job(self, name: str, tenant_id: str,
             group: Sequence[Claim]) -> Callable[[], Awaitable[list[str]]]:
        events = [c.row.event for c in group if c.row is not None and c.row.event is not None]

        async def job() -> list[str]:
            return await apply_batch(self.registry, name, tenant_id, events)

        return job


def _in_order(claims: Sequence[Claim], skipped: dict[int, Outcome],
              ran: dict[int, Outcome]) -> list[Outcome]:
    """The outcomes by claim, in the claims' order (``skipped`` by position, ``ran`` by
    ``id(claim)``)."""
    return [skipped[i] if i in skipped else ran[id(c)] for i, c in enumerate(claims)]


def _end(spans: list[trace.Span], outcome: str) -> None:
    for span in spans:
        span.set_attribute(telemetry.ATTR_OUTCOME, outcome)
        span.end()
