"""Priority per subscription (issue 33) on every backend: within a tenant's fair share (F1) its
higher-priority rows are claimed and run first, equal priorities oldest first; a tenant with
only low-priority rows keeps its round-robin turn beside a tenant with high-priority ones; a
row carries the priority it was materialized with (a change affects only later rows), stored
slim (no field at 0)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from board_outbox.model.board import EventSnapshot
from board_outbox.model.rows import EffectRow, new_launch_row, new_projection_row
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import Claim
from tests.support.kits import Kit, memory_kit

pytestmark = pytest.mark.anyio


def sub(tenant: str, name: str, priority: int = 0) -> Subscription:
    return Subscription(sub_id=f"{tenant}.{name}", tenant_id=tenant, bot=f"bot-{name}",
                        rule=MatchRule(event_types=("card.created",)), priority=priority)


async def events(kit: Kit, tenant: str, n: int) -> None:
    """``n`` events of one card for ``tenant``, materialized, then the clock +1 s (rows
    materialized later are due later)."""
    await kit.card(tenant, "c")
    for _ in range(n):
        await kit.emit(tenant, "card.created", "c")
    await kit.tail(seed="earliest").drain_all([tenant])
    kit.clock.advance(1)


def seen(claims: list[Claim]) -> list[tuple[str, str, int]]:
    return [(c.tenant_id, str(c.row.sub_id), c.row.seq) for c in claims if c.row is not None]


async def claim_all(kit: Kit, limit: int) -> list[list[tuple[str, str, int]]]:
    """Claims of ``limit`` until none is due: what each took, in order."""
    out: list[list[tuple[str, str, int]]] = []
    while batch := seen(await kit.outbox.claim_any(kit.clock.now(), 30, limit)):
        out.append(batch)
    return out


async def test_a_tenants_higher_priority_rows_are_claimed_first_oldest_first(kit: Kit) -> None:
    await kit.sub(sub("a", "low"))
    await kit.sub(sub("a", "high", priority=5))
    await kit.sub(sub("a", "top", priority=9))
    await events(kit, "a", 3)
    order = [r for batch in await claim_all(kit, 2) for r in batch]
    assert order == [("a", "a.top", 1), ("a", "a.top", 2), ("a", "a.top", 3),
                     ("a", "a.high", 1), ("a", "a.high", 2), ("a", "a.high", 3),
                     ("a", "a.low", 1), ("a", "a.low", 2), ("a", "a.low", 3)]


async def test_a_negative_priority_sinks_a_row_beneath_its_tenants_rows_in_the_claim(
    kit: Kit,
) -> None:
    """Below 0: after every row of its tenant the claim sees (docs/design.md, F1: under a
    backlog that is the pick's window; here every due row fits in it)."""
    await kit.sub(sub("a", "sunk", priority=-3))
    await kit.sub(sub("a", "low"))
    await events(kit, "a", 3)
    (batch,) = await claim_all(kit, 10)
    assert batch == [("a", "a.low", 1), ("a", "a.low", 2), ("a", "a.low", 3),
                     ("a", "a.sunk", 1), ("a", "a.sunk", 2), ("a", "a.sunk", 3)]


async def test_a_high_priority_row_newer_than_a_backlog_goes_first(kit: Kit) -> None:
    """Twelve older rows at priority 0 fill any claim's window; the two high-priority rows
    materialized after them are still the tenant's first (Mongo: the pick's third query)."""
    await kit.sub(sub("a", "low"))
    await events(kit, "a", 12)
    await kit.subs.delete("a.low")
    await kit.sub(sub("a", "high", priority=10))
    await events(kit, "a", 2)
    first = seen(await kit.outbox.claim_any(kit.clock.now(), 30, 2))
    assert first == [("a", "a.high", 13), ("a", "a.high", 14)]
    rest = [r for batch in await claim_all(kit, 5) for r in batch]
    assert rest == [("a", "a.low", s) for s in range(1, 13)]  # then oldest first, as ever


async def test_a_high_priority_row_takes_no_place_in_a_claim_it_is_not_for(kit: Kit) -> None:
    """Under a backlog (the window full) a claim still takes only due rows of the tenants it is
    for: a high-priority row not due yet, or of a tenant the claim does not serve, does not
    take the place of a due row (Mongo: the pick's third query is bounded like the others)."""
    t0 = kit.clock.now()
    await kit.sub(sub("a", "low"))
    await events(kit, "a", 12)  # due at t0
    await kit.sub(sub("b", "high", priority=10))
    await events(kit, "b", 2)  # due at t0 + 1
    kit.clock.advance(5)
    await kit.sub(sub("a", "high", priority=10))
    await events(kit, "a", 2)  # due at t0 + 7
    first = seen(await kit.outbox.claim_any(t0, 30, 2))
    assert first == [("a", "a.low", 1), ("a", "a.low", 2)]
    # at t0 + 2 b's rows are due, but this claim serves only tenant a
    got = seen(await kit.outbox.claim_any(t0 + 2, 30, 2, tenants=["a"]))
    assert got == [("a", "a.low", 3), ("a", "a.low", 4)]
    # once due, the high-priority rows go first within their tenant
    got = seen(await kit.outbox.claim_any(t0 + 7, 30, 2, tenants=["a"]))
    assert got == [("a", "a.high", 13), ("a", "a.high", 14)]


async def test_a_tenant_with_only_low_priority_rows_keeps_its_turn(kit: Kit) -> None:
    """No starvation: priority orders rows within a tenant, never across tenants."""
    await kit.sub(sub("hot", "urgent", priority=10))
    await kit.sub(sub("cold", "slow", priority=-10))
    await events(kit, "cold", 3)
    await events(kit, "hot", 6)
    batches = await claim_all(kit, 2)
    for batch in batches[:3]:  # while both have due rows, every claim takes one of each
        assert sorted(t for t, _, _ in batch) == ["cold", "hot"], batches
    assert [s for b in batches for t, _, s in b if t == "cold"] == [1, 2, 3]
    assert [s for b in batches for t, _, s in b if t == "hot"] == [1, 2, 3, 4, 5, 6]


async def test_a_priority_change_affects_only_rows_materialized_after_it(kit: Kit) -> None:
    await kit.sub(sub("a", "s"))
    await kit.sub(sub("a", "other", priority=1))
    await events(kit, "a", 2)
    await kit.sub(sub("a", "s", priority=2))  # raised after two events
    await events(kit, "a", 2)
    rows = {(r.sub_id, r.seq): r.priority for r in await kit.rows("a")}
    assert rows == {("a.s", 1): 0, ("a.s", 2): 0, ("a.s", 3): 2, ("a.s", 4): 2,
                    ("a.other", 1): 1, ("a.other", 2): 1, ("a.other", 3): 1, ("a.other", 4): 1}
    # stored slim: a row at 0 has no priority field (the Mongo adapter's documents)
    raw0, raw2 = await kit.raw_row("a/1/sub/a.s"), await kit.raw_row("a/3/sub/a.s")
    assert raw0 is not None and raw2 is not None and raw2["priority"] == 2
    assert raw0.get("priority", 0) == 0 and (kit.name == "memory" or "priority" not in raw0)
    order = [r for batch in await claim_all(kit, 3) for r in batch]
    assert order == [("a", "a.s", 3), ("a", "a.s", 4),
                     ("a", "a.other", 1), ("a", "a.other", 2), ("a", "a.other", 3),
                     ("a", "a.other", 4), ("a", "a.s", 1), ("a", "a.s", 2)]


async def test_the_worker_runs_a_tenants_higher_priority_rows_first(kit: Kit) -> None:
    """The worker's lanes run a tenant's rows in claimed order: highest priority first, handed
    rows (born claimed by our tail) and picked rows alike."""
    await kit.sub(sub("a", "low"))
    await kit.sub(sub("a", "high", priority=3))
    worker = kit.worker(batch_size=10)
    tail = kit.tail(seed="earliest")
    tail.handoff = worker
    await kit.card("a", "c")
    for _ in range(3):
        await kit.emit("a", "card.created", "c")
    await tail.drain_all(["a"])
    for _ in range(3):
        await worker.tick_any()
    ran = [(r.bot, r.seq) for r in kit.launcher.launches]
    assert ran == [("bot-high", 1), ("bot-high", 2), ("bot-high", 3),
                   ("bot-low", 1), ("bot-low", 2), ("bot-low", 3)]


async def test_a_tick_runs_its_handed_and_picked_rows_highest_priority_first(kit: Kit) -> None:
    """One tick merges the rows our tail handed over (born claimed) with the rows it picked:
    within the tenant, the higher priority runs first whichever way a row came."""
    await kit.sub(sub("a", "low"))
    await kit.sub(sub("a", "high", priority=3))
    await events(kit, "a", 2)  # materialized without a hand-off: pending, for the pick
    worker = kit.worker(batch_size=10)
    tail = kit.tail(seed="earliest")
    tail.handoff = worker
    for _ in range(2):
        await kit.emit("a", "card.created", "c")
    await tail.drain_all(["a"])  # born claimed for this worker
    res = await worker.tick_any()
    assert res.claimed == 8
    bots = [r.bot for r in kit.launcher.launches]
    assert bots == ["bot-high"] * 4 + ["bot-low"] * 4


def test_the_order_within_a_tenant_and_a_stored_priority_read_as_0_when_it_is_none() -> None:
    """``prioritized`` keeps every tenant's turns where they were and reorders only within a
    tenant (stable); ``priority_of`` reads a missing or bad stored value as 0."""
    from board_outbox.model.fairness import prioritized, priority_of

    items = [("a", 0, 1), ("b", 0, 1), ("a", 5, 2), ("b", -1, 2), ("a", 0, 3), ("b", 2, 3)]
    assert prioritized(items, lambda r: r[0], lambda r: r[1]) == [
        ("a", 5, 2), ("b", 2, 3), ("a", 0, 1), ("b", 0, 1), ("a", 0, 3), ("b", -1, 2)]
    for bad in ("high", 10**9, -11, 1.5, float("nan"), True, None):
        assert priority_of({"priority": bad}) == 0
    assert priority_of({}) == 0 and priority_of({"priority": -10}) == -10
    assert priority_of({"priority": 10}) == 10


async def claim_kinds(kit: Kit, limit: int) -> list[list[tuple[str, str]]]:
    """Claims of ``limit`` until none is due: each claim's (tenant, kind) in order."""
    out: list[list[tuple[str, str]]] = []
    while claims := await kit.outbox.claim_any(kit.clock.now(), 30, limit):
        out.append([(c.tenant_id, c.row.kind if c.row is not None else "?") for c in claims])
    return out


async def test_priorities_give_no_tenant_more_turns_for_its_launches(kit: Kit) -> None:
    """Priority never crosses tenants, projection rows beside the launches (each event makes a
    launch row and a projection row, as with the default ``board-reflect``): a's launches at
    +10 and b's at -10 take the places of the claims a's and b's launches take when both are
    at 0 -- before, a's launches rose above its projection rows and b's sank beneath its own,
    so a's launches went twice as often as b's."""

    async def claimed(a: str, pa: int, b: str, pb: int) -> list[list[tuple[str, str]]]:
        for tenant, n, priority in ((a, 8, pa), (b, 4, pb)):
            await kit.sub(sub(tenant, "s", priority))
            await kit.card(tenant, "c")
            for _ in range(n):
                await kit.emit(tenant, "card.created", "c")
            await kit.tail(projections=("board-reflect",), seed="earliest").drain_all([tenant])
            kit.clock.advance(1)
        names = {a: "first", b: "second"}
        return [[(names[t], kind) for t, kind in batch] for batch in await claim_kinds(kit, 2)]

    level = await claimed("c", 0, "d", 0)
    assert await claimed("a", 10, "b", -10) == level
    # while both have rows, every claim takes one of each; the second tenant's launches are
    # all claimed within its four claims' worth of turns, beside the first's
    assert all(sorted(t for t, _ in batch) == ["first", "second"] for batch in level[:8])
    launches = [i for i, batch in enumerate(level) if ("second", "launch") in batch]
    assert len(launches) == 4 and launches[-1] < 8, level


# --- the property: fair share across tenants whatever the priorities -------------------------

NOW = 10_000.0


@dataclass(frozen=True)
class Placed:
    tenant: str
    seq: int
    due: float
    priority: int | None  # None: a projection row

    def row(self, level: bool) -> EffectRow:
        """The row, its priority 0 when ``level`` (the fair reference's layout)."""
        ev = EventSnapshot(seq=self.seq, type="card.created", card_id="c")
        if self.priority is None:
            return new_projection_row(self.tenant, ev, "board-reflect", self.due)
        return new_launch_row(self.tenant, ev, sub(self.tenant, "s", 0 if level else self.priority),
                              self.due)


layouts = st.tuples(
    st.integers(1, 5),  # the claim's (or the take's) size
    st.lists(st.tuples(st.sampled_from("abcd"), st.one_of(st.none(), st.integers(-10, 10))),
             min_size=1, max_size=24),
    st.randoms(use_true_random=False),
)


def placed(spec: list[tuple[str, int | None]], rng: Any) -> list[Placed]:
    dues = rng.sample(range(1, 5000), len(spec))  # distinct due times, all due
    return [Placed(t, i + 1, NOW - d / 7, p)
            for i, ((t, p), d) in enumerate(zip(spec, dues, strict=True))]


def shape(rows: list[Placed]) -> list[tuple[str, bool]]:
    """Which tenant each place goes to, and whether a projection row fills it."""
    return [(r.tenant, r.priority is None) for r in rows]


def kept_order(rows: list[Placed], taken: list[Placed]) -> None:
    """No launch taken ahead of (or instead of) an older launch of its tenant of the same or a
    higher priority."""
    for i, r in enumerate(taken):
        if r.priority is None:
            continue
        for s in rows:
            if s.tenant == r.tenant and s.priority is not None and s.due < r.due and (
                    s.priority >= r.priority):
                assert s in taken[:i], (r, s, taken)


async def claim_once(backend: str, rows: list[Placed], limit: int, level: bool) -> list[Placed]:
    if backend == "memory":
        kit = memory_kit()
    else:
        from tests.support.kits import mongo_kit
        from tests.support.mongomock_async import mock_database

        kit = mongo_kit(mock_database(), "mongomock")
    # oldest due first: mongomock returns documents as stored, where a server walks the
    # ``pending_not_before`` index (so its window is the oldest due rows)
    await kit.outbox.upsert_rows([r.row(level) for r in sorted(rows, key=lambda r: r.due)])
    by_key = {r.row(level).row_key: r for r in rows}
    return [by_key[c.row.row_key] for c in await kit.outbox.claim_any(NOW, 30, limit)
            if c.row is not None]


@pytest.mark.parametrize("backend", ["memory", "mongomock"])
@settings(max_examples=200, deadline=None, derandomize=True, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(layouts)
def test_fair_share_across_tenants_holds_whatever_the_priorities(
    backend: str, layout: tuple[int, list[tuple[str, int | None]], Any],
) -> None:
    """Random layouts of due launch rows (random priorities) and projection rows over up to four
    tenants: a claim gives each of its places to the tenant, and to the kind of row (launch or
    projection), the fair reference -- the same rows, every priority 0 -- gives it; no launch
    is taken ahead of, or instead of, an older launch of its tenant of the same or a higher
    priority. Then the hand-off: the rows handed over, taken ``limit`` at a time until none is
    left, go to the tenants in the reference's order, take by take."""
    limit, spec, rng = layout
    rows = placed(spec, rng)

    async def claims() -> tuple[list[Placed], list[Placed]]:
        return (await claim_once(backend, rows, limit, level=False),
                await claim_once(backend, rows, limit, level=True))

    got, reference = anyio.run(claims)
    assert shape(got) == shape(reference)
    kept_order(rows, got)
    if backend != "memory":
        return
    takes = [handed(rows, limit, level) for level in (False, True)]
    assert [shape(t) for t in takes[0]] == [shape(t) for t in takes[1]]
    kept_order(rows, [r for t in takes[0] for r in t])


def handed(rows: list[Placed], room: int, level: bool) -> list[list[Placed]]:
    """``rows`` handed over (oldest due first, as a tail inserts them), then taken ``room`` at a
    time until none is left."""
    from board_outbox.engine.work.handoff import HandoffQueue
    from board_outbox.model.clock import ManualClock

    queue = HandoffQueue(clock=ManualClock(), batch_size=room, lease_seconds=30,
                         heartbeat_fraction=0.34, idle_seconds=0.25)
    by_ref = {}
    for r in sorted(rows, key=lambda r: r.due):
        by_ref[r.seq] = r
        queue.receive([Claim(ref=r.seq, claim_id="c", lease_until=NOW + 30, tenant_id=r.tenant,
                             row=r.row(level))])
    out: list[list[Placed]] = []
    while taken := queue.take(room, None):
        out.append([by_ref[c.ref] for c in taken])
    return out
