"""Claimed rows run in lanes: one lane per tenant, up to ``concurrency`` lanes at once.

A tenant's units run one after another in the order they were queued (F1: each tenant's
highest priority first within a claim, and no row overtakes an earlier due row of its tenant of
the same or higher priority, hence of its subscription and card -- the worker orders a tick's
claims so, ``handoff.by_priority``, and a later claim's rows queue behind the earlier ones);
different tenants' units run side by side. One slow launch then holds up only its own tenant's
rows.

The lanes outlive a batch (``LanePool``): while one tenant's slow launch runs, the worker keeps
claiming, and another tenant's new rows start in their own lane at once, instead of waiting for
the slowest lane of the batch they were not even in (before, a batch's lanes ended together, so
every fast tenant's next launch waited for the slowest one). ``run_lanes`` is one batch on a pool
of its own.

Failure stays as it was when units ran one by one: once a unit raises, no unit starts anywhere
(the ones running finish), and the first error is the caller's to raise after that. A unit that
is running is never cancelled because a sibling failed: a cancelled launch may have reached its
runner, and its row would run again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio
from anyio.abc import TaskGroup

U = TypeVar("U")


@dataclass
class Lanes(Generic[U]):
    """What became of a batch's units (filled in as they run, so a caller cancelled midway
    still knows which units started and which ran to their end)."""

    started: list[U] = field(default_factory=list)
    finished: list[U] = field(default_factory=list)
    error: BaseException | None = None


class LanePool(Generic[U]):
    """Lanes that live as long as the task group ``tg``: ``submit`` queues units in their lanes
    (by ``lane_of``; one lane for all when ``concurrency`` is 1, so they keep the order they
    came in), a lane's task runs its units one after another and ends when its queue is empty,
    and at most ``concurrency`` units run at once. No unit starts once ``stopping()`` or once
    one has raised (``error``, until the owner takes it: ``take_error``). ``on_lane_done`` is
    called when a lane ends with nothing left to run, or a unit raised (the owner may have
    room for more)."""

    def __init__(self, tg: TaskGroup, lane_of: Callable[[U], Hashable],
                 run: Callable[[U], Awaitable[None]], *, concurrency: int,
                 stopping: Callable[[], bool]) -> None:
        self._tg = tg
        self._lane_of = lane_of if concurrency > 1 else (lambda unit: None)
        self._run = run
        self._stopping = stopping
        self._limiter = anyio.CapacityLimiter(max(1, concurrency))
        self._queues: dict[Hashable, deque[U]] = {}
        self._tasks: set[Hashable] = set()  # the lanes with a task
        self.running: dict[int, U] = {}  # started and not ended, by id
        self.interrupted: list[U] = []  # cancelled while they ran
        self.error: BaseException | None = None
        self._changed = anyio.Event()
        self.on_start: Callable[[U], None] = lambda unit: None
        self.on_end: Callable[[U, bool], None] = lambda unit, ok: None  # ok: it ran to its end
        self.on_lane_done: Callable[[], None] = lambda: None

    def submit(self, units: Sequence[U]) -> None:
        """Queue ``units`` at the end of their lanes; a lane without a task gets one."""
        for unit in units:
            key = self._lane_of(unit)
            self._queues.setdefault(key, deque()).append(unit)
            if key not in self._tasks:
                self._tasks.add(key)
                self._tg.start_soon(self._lane, key)

    @property
    def waiting(self) -> list[U]:
        """The units queued and not started."""
        return [u for q in self._queues.values() for u in q]

    def take_waiting(self) -> list[U]:
        """Every unit queued and not started leaves its lane (given back, or dropped)."""
        out = self.waiting
        for q in self._queues.values():
            q.clear()
        return out

    def take_error(self) -> BaseException | None:
        """The first error a unit raised (None: none); the lanes may start units again."""
        error, self.error = self.error, None
        return error

    def settled(self) -> bool:
        """Nothing runs, and nothing queued will start (none queued, or stopping, or failed)."""
        return not self.running and (
            not any(self._queues.values()) or self.error is not None or self._stopping())

    async def wait_settled(self) -> None:
        while not self.settled():
            await self._changed.wait()

    def _moved(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _lane(self, key: Hashable) -> None:
        q = self._queues[key]
        try:
            while q:
                async with self._limiter:
                    if not q or self.error is not None or self._stopping():
                        return
                    unit = q.popleft()
                    self.running[id(unit)] = unit
                    self.on_start(unit)
                    ok = False
                    try:
                        await self._run(unit)
                        ok = True
                    except anyio.get_cancelled_exc_class():
                        self.interrupted.append(unit)
                        raise
                    except BaseException as exc:
                        if self.error is None:
                            self.error = exc
                        return
                    finally:
                        del self.running[id(unit)]
                        self.on_end(unit, ok)
        finally:
            self._tasks.discard(key)
            if not q and self._queues.get(key) is q:
                del self._queues[key]
            self._moved()
            if not q or self.error is not None:
                self.on_lane_done()


async def run_lanes(
    units: Sequence[U],
    lane_of: Callable[[U], Hashable],
    run: Callable[[U], Awaitable[None]],
    *,
    concurrency: int,
    stopping: Callable[[], bool],
    lanes: Lanes[U] | None = None,
) -> Lanes[U]:
    """Run ``units`` (in lanes by ``lane_of``) on a pool of their own, no unit starting once
    ``stopping()`` or once one has raised; the first error is raised after the others
    finished."""
    out = lanes if lanes is not None else Lanes[U]()
    async with anyio.create_task_group() as tg:
        pool = LanePool(tg, lane_of, run, concurrency=concurrency, stopping=stopping)
        pool.on_start = out.started.append
        pool.on_end = lambda unit, ok: out.finished.append(unit) if ok else None
        pool.submit(units)
        await pool.wait_settled()
    out.error = pool.take_error()  # once every lane has ended: none starts a unit meanwhile
    if out.error is not None:
        raise out.error
    return out
