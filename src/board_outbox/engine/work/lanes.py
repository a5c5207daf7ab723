"""A claimed batch run in lanes: one lane per tenant, up to ``concurrency`` lanes at once.

A tenant's units run one after another in the order the claim gave them (F1: each tenant's
highest priority first, and no row overtakes an earlier due row of its tenant of the same or
higher priority, hence of its subscription and card -- the worker orders a tick's claims so,
``handoff.by_priority``); different tenants' units run side by side. One slow launch then holds
up only its own tenant's rows, not every row the batch claimed (before, a batch ran strictly
one unit after another, so a 60-second launch held every other tenant's launch in the replica
for 60 seconds).

Failure stays as it was when units ran one by one: once a unit raises, no unit starts anywhere
(the ones running finish), and the first error is raised as itself after the lanes stop. A unit
that is running is never cancelled because a sibling failed: a cancelled launch may have reached
its runner, and its row would run again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio

U = TypeVar("U")


@dataclass
class Lanes(Generic[U]):
    """What became of a batch's units (filled in as they run, so a caller cancelled midway
    still knows which units started and which ran to their end)."""

    started: list[U] = field(default_factory=list)
    finished: list[U] = field(default_factory=list)
    error: BaseException | None = None


async def run_lanes(
    units: Sequence[U],
    lane_of: Callable[[U], Hashable],
    run: Callable[[U], Awaitable[None]],
    *,
    concurrency: int,
    stopping: Callable[[], bool],
    lanes: Lanes[U] | None = None,
) -> Lanes[U]:
    """Run ``units`` (in lanes by ``lane_of``), no unit starting once ``stopping()`` or once one
    has raised; the first error is raised after the others finished."""
    out = lanes if lanes is not None else Lanes[U]()
    queues: dict[Hashable, list[U]] = {}
    for unit in units:
        queues.setdefault(lane_of(unit), []).append(unit)
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    async def lane(queue: list[U]) -> None:
        for unit in queue:
            async with limiter:
                if out.error is not None or stopping():
                    return
                out.started.append(unit)
                try:
                    await run(unit)
                except anyio.get_cancelled_exc_class():
                    raise
                except BaseException as exc:
                    if out.error is None:
                        out.error = exc
                    return
                out.finished.append(unit)

    if len(queues) == 1 or concurrency <= 1:
        await lane(list(units))  # one after another, in the claim's order: no task group
    else:
        async with anyio.create_task_group() as tg:
            for queue in queues.values():
                tg.start_soon(lane, queue)
    if out.error is not None:
        raise out.error
    return out
