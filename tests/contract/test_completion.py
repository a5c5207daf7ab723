"""Completion in bulk (issue 29, River's batch completer), on every backend: the done marks of a
claimed batch go out together (one fenced bulk write at the end of the batch, and every
``mark_flush_seconds`` while it runs); a flush rides a store outage out until the *first* lease
of its rows ends, and no mark taken off the stage is ever dropped."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from board_outbox.engine.work.worker import EffectWorker
from board_outbox.model import transitions as tr
from board_outbox.model.errors import StoreUnavailable
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import EffectOutbox, LaunchRequest
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

T = "t1"
SUB = Subscription(sub_id="s", tenant_id=T, bot="bot",
                   rule=MatchRule(event_types=("card.created",)))


class MarksSpy:
    """The outbox as the completer sees it: ``apply_marks`` goes through ``hook`` first."""

    def __init__(self, outbox: EffectOutbox,
                 hook: Callable[[list[Any]], Awaitable[None]]) -> None:
        self._outbox, self.hook, self.calls = outbox, hook, 0

    async def apply_marks(self, marks: list[Any]) -> list[Any]:
        self.calls += 1
        await self.hook(marks)
        return await self._outbox.apply_marks(marks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._outbox, name)


def spy_marks(worker: EffectWorker, hook: Callable[[list[Any]], Awaitable[None]]) -> MarksSpy:
    spy = MarksSpy(worker.outbox, hook)
    worker.completer.outbox = spy  # type: ignore[assignment]
    return spy


async def materialize(kit: Kit, n: int, tenant: str = T) -> None:
    await kit.sub(Subscription(sub_id=f"{tenant}.s", tenant_id=tenant, bot="bot",
                               rule=SUB.rule))
    for i in range(1, n + 1):
        await kit.card(tenant, f"c{i}")
        await kit.emit(tenant, "card.created", f"c{i}")
    await kit.tail(seed="earliest").drain_all([tenant])


def paced(kit: Kit, worker: EffectWorker) -> list[float]:
    """The completer's pauses between tries move the manual clock instead of sleeping; the
    list holds how long each was."""
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)
        kit.clock.advance(seconds)
        await anyio.lowlevel.checkpoint()

    worker.completer.pause = pause
    return pauses


def slow_launches(kit: Kit, seconds: float, before: Callable[[LaunchRequest], Awaitable[None]]
                  | None = None) -> None:
    inner = kit.launcher.launch

    async def launch(req: LaunchRequest) -> str:
        if before is not None:
            await before(req)
        await anyio.sleep(seconds)
        return await inner(req)

    kit.launcher.launch = launch  # type: ignore[method-assign]


async def test_a_flush_cut_off_by_the_end_of_its_batch_loses_no_mark(kit: Kit) -> None:
    """The flush timer's write is still in flight when the batch ends (the timer is stopped
    then): its marks go back on the stage and the batch's closing flush writes them. Every row
    is done once; none is left claimed to run again after its lease."""
    await materialize(kit, 6)
    worker = kit.worker(batch_size=10, mark_flush_seconds=0.01)

    async def slow_write(_marks: list[Any]) -> None:
        await anyio.sleep(0.2)  # longer than what is left of the batch

    spy = spy_marks(worker, slow_write)
    slow_launches(kit, 0.005)
    res = await worker.tick_any()
    assert (res.claimed, res.done, res.unrecorded, res.lease_lost) == (6, 6, 0, 0)
    assert spy.calls >= 2  # the timer's flush (cut off) and the closing one
    assert {(r.state, r.attempts) for r in await kit.rows(T)} == {("done", 0)}
    assert worker.inflight == {}


async def test_a_long_batch_writes_its_marks_while_it_runs(kit: Kit) -> None:
    """A batch whose launches take a while: the rows launched first are done in the store
    before the last launch starts (the launch -> done window is ``mark_flush_seconds``, not the
    whole batch)."""
    await materialize(kit, 5)
    worker = kit.worker(batch_size=10, mark_flush_seconds=0.02)
    seen: dict[int, str | None] = {}

    async def look(req: LaunchRequest) -> None:
        if req.seq == 5:
            first = f"{T}/1/sub/{T}.s"
            seen[req.seq] = (await kit.raw_row(first) or {}).get("state")

    slow_launches(kit, 0.03, look)
    res = await worker.tick_any()
    assert res.done == 5
    assert seen == {5: "done"}


async def test_a_flush_rides_out_an_outage_inside_the_lease(kit: Kit) -> None:
    """Mere overload: the marks' write fails more often than the backoff table is long, but the
    lease holds: the flush keeps trying and records every row (no "done but not recorded")."""
    await materialize(kit, 3)
    worker = kit.worker(batch_size=10, lease_seconds=30.0, heartbeat_fraction=0)
    pauses = paced(kit, worker)
    failures = iter(range(10))

    async def outage(_marks: list[Any]) -> None:
        if next(failures, None) is not None:
            raise StoreUnavailable("overloaded")

    spy = spy_marks(worker, outage)
    res = await worker.tick_any()
    assert (res.done, res.unrecorded) == (3, 0)
    assert spy.calls == 11 and len(pauses) == 10 and sum(pauses) < 30.0
    assert {r.state for r in await kit.rows(T)} == {"done"}


async def test_a_flush_gives_up_when_the_first_lease_ends(kit: Kit) -> None:
    """An outage longer than the lease: the flush stops trying once the earliest lease among its
    rows has ended (a mark written later could land on a row another replica runs now), even
    though others of its rows hold a later lease. The rows stay claimed; they run again once
    reclaimed (ADR-094's second window)."""
    await materialize(kit, 2)
    await materialize(kit, 2, tenant="t2")
    worker = kit.worker(batch_size=10, lease_seconds=10.0, heartbeat_fraction=0)
    start = kit.clock.now()
    first = await worker.outbox.claim_any(start, 10.0, 2, tenants=[T])
    later = await worker.outbox.claim_any(start, 40.0, 2, tenants=["t2"])  # a longer lease
    assert len(first) == len(later) == 2
    first_end = min(c.lease_until for c in first)
    assert min(c.lease_until for c in later) > first_end + 20
    paced(kit, worker)
    tries: list[float] = []

    async def outage(_marks: list[Any]) -> None:
        tries.append(kit.clock.now())
        raise StoreUnavailable("down")

    spy_marks(worker, outage)
    res = await worker.run_claims(first + later)
    assert (res.unrecorded, res.done) == (4, 0)
    assert len(tries) > 6  # it kept trying past the backoff table, while the first lease held
    assert max(tries) < first_end  # and never once the first lease had ended
    assert {r.state for r in await kit.rows()} == {"claimed"}


async def test_a_row_whose_lease_was_stolen_before_the_flush_is_not_marked(kit: Kit) -> None:
    """A staged row whose lease another worker took meanwhile: the flush leaves it alone (its
    fence holds) and records the others."""
    await materialize(kit, 3)
    worker = kit.worker(batch_size=10, heartbeat_fraction=0)
    claims = await worker.outbox.claim_any(kit.clock.now(), 30.0, 3, tenants=[T])
    assert len(claims) == 3
    thief = claims[1]
    stolen: list[Any] = []

    async def steal(marks: list[Any]) -> None:
        if stolen:
            return
        # meanwhile the second row moved to another worker's claim (given back, claimed anew)
        now = kit.clock.now()
        assert await worker.outbox.apply_claimed(thief.ref, thief.claim_id, tr.release(now=now))
        (taken,) = await worker.outbox.claim_any(now, 30.0, 10, tenants=[T])
        assert taken.ref == thief.ref and taken.claim_id != thief.claim_id
        stolen.append(taken)

    spy_marks(worker, steal)
    res = await worker.run_claims(claims)
    assert (res.done, res.lease_lost) == (2, 1)
    states = {r.row_key: r.state for r in await kit.rows(T)}
    assert states[thief.row.row_key if thief.row else ""] == "claimed"
    assert sorted(states.values()) == ["claimed", "done", "done"]
