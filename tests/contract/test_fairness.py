"""F1 on every backend: a claim takes due rows round-robin by tenant, so one tenant's backlog
delays another tenant's rows by at most about one claim; a tenant's rows are claimed in order;
and another owner's row is taken once it is old measured from its materialization."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from board_outbox.model.board import EventSnapshot
from board_outbox.model.fairness import pick, round_robin
from board_outbox.model.rows import EffectRow, new_launch_row
from board_outbox.model.subscriptions import MatchRule, Subscription
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio


def sub(tenant: str) -> Subscription:
    return Subscription(sub_id=f"{tenant}.s", tenant_id=tenant, bot="bot",
                        rule=MatchRule(event_types=("card.created",)))


async def backlog(kit: Kit, counts: dict[str, int]) -> None:
    """``counts[t]`` events of one card for each tenant, materialized tenant by tenant in the
    order given, one second apart: the first tenant's rows are the oldest."""
    for tenant, n in counts.items():
        await kit.sub(sub(tenant))
        await kit.card(tenant, "c")
        for _ in range(n):
            await kit.emit(tenant, "card.created", "c")
        await kit.tail(seed="earliest").drain_all([tenant])
        kit.clock.advance(1)


async def test_a_claim_smaller_than_the_due_rows_takes_rows_of_every_tenant(kit: Kit) -> None:
    await backlog(kit, {"noisy": 12, "q1": 1, "q2": 1})
    claims = await kit.outbox.claim_any(kit.clock.now(), 30, 3)
    assert sorted(c.tenant_id for c in claims) == ["noisy", "q1", "q2"]
    # the same with ownership on (the owned tenants' rows round-robin first)
    await backlog(kit, {"q3": 1})
    owned = {"noisy", "q1", "q2", "q3"}
    claims = await kit.outbox.claim_any(kit.clock.now(), 30, 2, prefer=owned,
                                        steal_before=kit.clock.now() - 1)
    assert sorted(c.tenant_id for c in claims) == ["noisy", "q3"]


async def test_rows_of_a_tenant_are_claimed_in_order_and_interleaved(kit: Kit) -> None:
    await backlog(kit, {"noisy": 6, "quiet": 2})
    order: list[tuple[str, int]] = []
    claims = await kit.outbox.claim_any(kit.clock.now(), 30, 2)
    while claims:
        assert claims[0].row is not None
        batch = [(c.tenant_id, c.row.seq) for c in claims if c.row is not None]
        order += batch
        if len(order) <= 4:  # while both have due rows, every claim takes one of each
            assert {t for t, _ in batch} == {"noisy", "quiet"}
        claims = await kit.outbox.claim_any(kit.clock.now(), 30, 2)
    assert [s for t, s in order if t == "noisy"] == [1, 2, 3, 4, 5, 6]
    assert [s for t, s in order if t == "quiet"] == [1, 2]


async def test_another_owners_row_is_stolen_by_its_materialization_time(kit: Kit) -> None:
    """A retried row (due now, materialized long ago) of a tenant another replica owns is
    overdue; a fresh one is left to its owner."""
    now = kit.clock.now()
    ev = EventSnapshot(seq=1, type="card.created", card_id="c")
    old = new_launch_row("b", ev, sub("b"), now - 10)
    old.not_before = now  # its retry is due now
    fresh = new_launch_row("c", ev, sub("c"), now)
    await kit.outbox.upsert_rows([old, fresh])
    claims = await kit.outbox.claim_any(now, 30, 10, prefer={"a"}, steal_before=now - 1)
    assert [c.tenant_id for c in claims] == ["b"]


def test_round_robin_keeps_each_tenants_order() -> None:
    rows = [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("c", 1), ("b", 2)]
    assert round_robin(rows, lambda r: r[0]) == [
        ("a", 1), ("b", 1), ("c", 1), ("a", 2), ("b", 2), ("a", 3)]
    docs = [{"tenant_id": t, "seq": s, "created_at": 0.0} for t, s in rows]
    assert [(d["tenant_id"], d["seq"]) for d in pick(docs, 4, prefer={"c"}, steal_before=0.0)] \
        == [("c", 1), ("a", 1), ("b", 1), ("a", 2)]
    assert pick(docs, 4, prefer={"c"}, steal_before=-1.0) == [docs[4]]  # nothing old enough


async def test_the_tail_drains_one_batch_per_tenant_per_round(kit: Kit) -> None:
    """A tenant's backlog holds up another tenant's events by one tail batch, not by the whole
    backlog; ``rounds=1`` (the service's pass) leaves the rest for the next pass."""
    for tenant, n in {"noisy": 7, "quiet": 1}.items():
        await kit.sub(sub(tenant))
        await kit.card(tenant, "c")
        for _ in range(n):
            await kit.emit(tenant, "card.created", "c")
    tail = kit.tail(seed="earliest", batch_size=3)
    first = await tail.drain_all(["noisy", "quiet"], rounds=1)
    assert [(r.tenant_id, r.materialized) for r in first] == [("noisy", 3), ("quiet", 1)]
    assert [tail.more_behind(r) for r in first] == [True, False]
    await kit.emit("quiet", "card.created", "c")
    rest = await tail.drain_all(["noisy", "quiet"])
    assert [(r.tenant_id, r.materialized) for r in rest] == [
        ("noisy", 3), ("quiet", 1), ("noisy", 1)]
    assert len(await kit.rows()) == 9


async def test_tail_batches_are_cut_to_the_measured_pace(kit: Kit) -> None:
    """On a store slower than ``batch_seconds`` per batch, the next batches shrink (never below
    50 events), so a backlog holds up the other tenants by about ``batch_seconds`` per round."""
    await kit.sub(sub("noisy"))
    await kit.card("noisy", "c")
    for _ in range(300):
        await kit.emit("noisy", "card.created", "c")
    tail = kit.tail(seed="earliest", batch_size=200, batch_seconds=1e-9)
    results = await tail.drain_all(["noisy"])
    # the last full batch may have had more behind it: one more (empty) read says it did not
    assert [r.materialized for r in results] == [200, 50, 50, 0]
    assert [r.limit for r in results] == [200, 50, 50, 50]
    assert len(await kit.rows()) == 300


# --- F1 and S1 as a property: generated layouts against a reference claim ------------------
#
# Each layout is a set of rows of several tenants -- due or not yet, of varied priorities,
# materialized long ago (stealable) or lately -- inserted in an order unrelated to their due
# times or tenants, and one claim (a limit, maybe a preference and a steal cut-off, maybe a
# tenant filter). The claim is checked against ``fair_claim``, written here from the contract
# (not with ``fairness.pick``), of the rows the backend's pick reads: the twin reads every due
# row; the Mongo pick every one while they fit its window, and under a backlog the window, the
# hidden tenants' rows and the rows above priority 0 (``mongo_reads``, docs/design.md). Under a
# backlog every backend also keeps ``check_backlog``, the rules that hold of any such read.

NOW = 10_000.0
LAYOUTS = 120  # of each kind per backend


@dataclass(frozen=True)
class Row:
    tenant: str
    seq: int
    due: float  # not_before
    created: float  # created_at: what the steal cut-off measures
    priority: int

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.seq}/sub/{self.tenant}.s"

    def effect_row(self) -> EffectRow:
        ev = EventSnapshot(seq=self.seq, type="card.created", card_id="c")
        row = new_launch_row(self.tenant, ev, sub(self.tenant), self.created)
        row.not_before, row.priority = self.due, self.priority
        return row


@dataclass(frozen=True)
class Layout:
    rows: tuple[Row, ...]  # in the order they are inserted
    limit: int
    prefer: frozenset[str] | None
    steal_before: float | None
    tenants: frozenset[str] | None  # the claim's tenant filter

    def asked(self, r: Row) -> bool:
        return r.due <= NOW and (self.tenants is None or r.tenant in self.tenants)

    def owned(self, r: Row) -> bool:
        return self.prefer is None or r.tenant in self.prefer

    def claimable(self, r: Row) -> bool:
        """Due, asked for, and ours or another owner's materialized by the cut-off."""
        return self.asked(r) and (self.owned(r) or (
            self.steal_before is not None and r.created <= self.steal_before))

    @property
    def window(self) -> int:
        """The oldest due rows the Mongo pick reads first: ``limit``, twice that under a
        preference (so owned rows among others' fresh ones still fill the claim)."""
        return self.limit if self.prefer is None else 2 * self.limit

    def due_rows(self) -> list[Row]:
        """The due rows asked for, oldest first (the window is a prefix)."""
        return sorted((r for r in self.rows if self.asked(r)), key=lambda r: r.due)


def turns(rows: list[Row], extra: Sequence[Row] = ()) -> list[Row]:
    """``rows`` round-robin by tenant: every tenant's first row, then every second, ...; the
    tenants in the order of their oldest row; each tenant's places (its rows) taken by the
    highest priority, then oldest, of its rows and its ``extra`` rows (which hold no place);
    then the rows left over, in turns the same way."""
    mine: dict[str, list[Row]] = {}
    for r in sorted(rows, key=lambda r: r.due):
        mine.setdefault(r.tenant, []).append(r)
    pools = {t: sorted(q + [r for r in extra if r.tenant == t], key=lambda r: (-r.priority, r.due))
             for t, q in mine.items()}
    for r in sorted(extra, key=lambda r: r.due):
        if r.tenant not in mine:
            pools.setdefault(r.tenant, []).append(r)
    placed = [pools[t][:len(mine[t])] for t in mine]
    left = [pool[len(mine.get(t, ())):] for t, pool in pools.items()]
    return [q[d] for queues in (placed, left) for d in range(max(map(len, queues), default=0))
            for q in queues if d < len(q)]


def fair_claim(lay: Layout, seen: list[Row] | None = None,
               extra: Sequence[Row] = ()) -> list[Row]:
    """The claim F1 and S1 ask for of the rows ``seen`` (default: all), with ``extra`` rows
    competing for their tenant's places: the owned tenants' claimable rows in turns, then the
    other owners' stealable rows in turns; the first ``limit``."""
    rows = [r for r in (lay.rows if seen is None else seen) if lay.claimable(r)]
    more = [r for r in extra if lay.claimable(r)]
    return (turns([r for r in rows if lay.owned(r)], [r for r in more if lay.owned(r)])
            + turns([r for r in rows if not lay.owned(r)],
                    [r for r in more if not lay.owned(r)]))[:lay.limit]


def mongo_reads(lay: Layout) -> tuple[list[Row], list[Row]] | None:
    """The due rows the Mongo pick reads (docs/design.md, F1), as places and extra rows: every
    one while they fit its window; under a backlog the window and the due rows of the tenants
    it does not show (the second query), and, as extra rows that only compete for their
    tenant's places, the due rows above priority 0 (the third). None when the second or third
    query has more than a window to read: which part it reads is the server's index order."""
    due = lay.due_rows()
    if len(due) < lay.window:
        return due, []
    window = due[:lay.window]
    shown = {r.tenant for r in window}
    hidden = [r for r in due if r.tenant not in shown]
    urgent = [r for r in due if r.priority > 0]
    if len(hidden) > lay.window or len(urgent) > lay.window:
        return None
    places = window + hidden
    return places, [r for r in urgent if r not in places]


def layout(rng: random.Random, n: int, *, fits: bool) -> Layout:
    """A random layout; ``fits``: fewer due rows (of the tenants asked for) than the window,
    else at least a window's worth (a backlog)."""
    limit = rng.choice([1, 2, 3, 4, 4, 5, 5, 6, 6])
    names = [f"L{n}{c}" for c in rng.sample("abcdefghjkmnpqrstuvwxyz", rng.randint(2, 6))]
    prefer = None if rng.random() < 0.3 else frozenset(
        rng.sample(names, rng.randint(0, len(names))) + (["L-idle"] if rng.random() < 0.2 else []))
    steal_before = None if prefer is None else NOW - rng.randint(100, 900)
    tenants = (frozenset(rng.sample(names, rng.randint(1, len(names))))
               if fits and rng.random() < 0.25 else None)
    asked = sorted(tenants or names)
    window = limit if prefer is None else 2 * limit
    mine = [t for t in asked if prefer is not None and t in prefer]
    theirs = [t for t in asked if t not in mine]
    # every owned row behind the others' due rows, more than ``limit`` of them where the layout
    # holds that many: a window of ``limit`` alone would not show the owned rows
    behind = bool(mine and theirs) and rng.random() < 0.4
    if fits:
        # under a preference, often between one and two limits: a window of ``limit`` would
        # be full and miss rows behind it
        low = limit if prefer is not None and rng.random() < 0.6 else 1
        low = limit + 2 if behind and limit >= 3 else low
        count = rng.randint(min(low, window - 1), window - 1)
    else:
        count = rng.randint(window, 3 * window + 4)
    times = rng.sample(range(1, 3000), count + 3)
    if behind:
        k = rng.randint(1, max(1, count - limit - 1))
        owners = rng.choices(theirs, k=count - k) + rng.choices(mine, k=k)
        times[:count] = sorted(times[:count], reverse=True)
    else:
        owners = rng.choices(asked, [rng.choice([1, 1, 2, 6]) for _ in asked], k=count)
    owners += rng.choices(names, k=rng.randint(0, 3))  # not due yet, or of a tenant not asked
    prios = [-2, 0, 0, 0, 3, 7] if rng.random() < 0.4 else [0]
    rows: list[Row] = []
    for i, (tenant, t) in enumerate(zip(owners, times, strict=False)):
        due = NOW - t / 3 if i < count else NOW + t  # distinct due times
        if i >= count and tenant not in asked and rng.random() < 0.5:
            due = NOW - t / 3  # due, but the claim does not ask for this tenant
        created = due - rng.choice([0.0, 0.0, rng.uniform(0, 900)])  # a retry's backoff
        if steal_before is not None and rng.random() < 0.1:
            created = min(due, steal_before)  # at the cut-off exactly: stealable
        rows.append(Row(tenant, i + 1, due, created, rng.choice(prios)))
    order = rng.choice(["shuffled", "newest first", "tenant by tenant"])
    if order == "shuffled":
        rng.shuffle(rows)
    elif order == "newest first":
        rows.sort(key=lambda r: -r.due)
    else:
        rng.shuffle(names)
        rows.sort(key=lambda r: (names.index(r.tenant), -r.due))
    return Layout(tuple(rows), limit, prefer, steal_before, tenants)


async def claim_layout(kit: Kit, lay: Layout, rows: tuple[Row, ...] | None = None) -> list[str]:
    """Insert the layout's rows (in the order given), claim once, and remove them all again."""
    await kit.outbox.upsert_rows([r.effect_row() for r in rows or lay.rows])
    claims = await kit.outbox.claim_any(NOW, 30, lay.limit, prefer=lay.prefer,
                                        steal_before=lay.steal_before, tenants=lay.tenants)
    assert kit.delete_raw_row is not None
    for r in lay.rows:
        await kit.delete_raw_row(r.key)
    return [c.row.row_key if c.row is not None else "?" for c in claims]


def described(lay: Layout, got: list[str], seen: list[Row] | None = None,
              extra: Sequence[Row] = ()) -> str:
    rows = "\n".join(f"  {r.key:18} due {r.due - NOW:+8.1f} created {r.created - NOW:+8.1f} "
                     f"p{r.priority:+d}{'' if lay.claimable(r) else ' (not claimable)'}"
                     for r in sorted(lay.rows, key=lambda r: (r.tenant, r.due)))
    return (f"limit {lay.limit}, prefer {sorted(lay.prefer) if lay.prefer is not None else None}, "
            f"steal_before {None if lay.steal_before is None else lay.steal_before - NOW}, "
            f"tenants {sorted(lay.tenants) if lay.tenants else None}, inserted "
            f"{[r.key for r in lay.rows]}\n{rows}\nclaimed {got}\nwanted  "
            f"{[r.key for r in fair_claim(lay, seen, extra)]}")


async def test_a_claim_is_the_fair_claim_of_every_due_row_when_its_pick_reads_them_all(
    kit: Kit,
) -> None:
    """Fewer due rows than the pick's window (``limit``; ``2 * limit`` under a preference):
    every backend claims exactly ``fair_claim`` -- whatever order the rows were inserted in
    (tenants first inserted are not the tenants first due), with owned rows behind more than
    ``limit`` older rows of other tenants, stealable or not."""
    rng = random.Random(32)
    for n in range(LAYOUTS):
        lay = layout(rng, n, fits=True)
        got = await claim_layout(kit, lay)
        assert got == [r.key for r in fair_claim(lay)], described(lay, got)


def check_backlog(lay: Layout, got: list[str]) -> None:
    """What a claim keeps under a backlog, on every backend: the rules of ``fair_claim`` for the
    rows its pick reads, of which the window -- the oldest ``window`` due rows asked for -- is
    the part every backend reads (the twin reads them all)."""
    rows = {r.key: r for r in lay.rows}
    claimed = [rows[k] for k in got]
    window = lay.due_rows()[:lay.window]
    # S1: only due rows asked for, ours or stealable; never a fresh row of another owner
    assert len(set(got)) == len(got) <= lay.limit
    assert all(lay.claimable(r) for r in claimed)
    # the claim fills from the claimable rows the window holds (twice the limit under a
    # preference: owned rows among others' fresh ones)
    assert len(claimed) >= min(lay.limit, sum(lay.claimable(r) for r in window))
    # S1: the owned rows first; a stolen row only once the window's owned rows are all taken
    owned = [lay.owned(r) for r in claimed]
    assert owned == sorted(owned, reverse=True)
    if not all(owned):
        assert all(r in claimed for r in window if lay.claimable(r) and lay.owned(r))
    for mine in (True, False):
        group = [r for r in claimed if lay.owned(r) == mine]
        taken: dict[str, int] = {}
        turn = []  # each row's turn: how many rows of its tenant came before it
        for r in group:
            turn.append(taken.get(r.tenant, 0))
            taken[r.tenant] = turn[-1] + 1
        # F1: in turns -- no tenant's second row before every tenant's first, and so on
        assert turn == sorted(turn)
        shown = [r for r in window if lay.claimable(r) and lay.owned(r) == mine]
        most = max(taken.values(), default=0)
        for t in {r.tenant for r in shown}:
            assert taken.get(t, 0) >= min(most - 1, sum(r.tenant == t for r in shown))
        # the tenants the window shows take their first turns first, in the order of their
        # oldest claimable row (not the order they were first inserted in)
        firsts = [r.tenant for r, n in zip(group, turn, strict=True) if n == 0]
        order = list(dict.fromkeys(r.tenant for r in shown))
        assert firsts[:len(order)] == order[:len(firsts)]
    for r in claimed:
        mates = [s for s in lay.rows if s.tenant == r.tenant and lay.claimable(s)]
        # F1: no row overtakes an older claimable row of its tenant of the same or higher
        # priority (it is claimed, and ahead of it)
        for s in mates:
            if s.due < r.due and s.priority >= r.priority:
                assert s in claimed and claimed.index(s) < claimed.index(r)
        # issue 33: a tenant's rows above its claimed rows' priority (and above 0) go first,
        # as long as the due rows above 0 fit a window (the third query reads that many)
        if sum(s.priority > 0 for s in lay.due_rows()) <= lay.window:
            for s in mates:
                if s.priority > max(r.priority, 0):
                    assert s in claimed and claimed.index(s) < claimed.index(r)


@pytest.mark.timeout(180)  # heavy: tens of seconds on a loaded machine (default 90 s)
async def test_under_a_backlog_a_claim_keeps_the_fair_claims_rules_for_what_its_pick_reads(
    kit: Kit,
) -> None:
    """At least a window of due rows (a backlog): every backend claims ``fair_claim`` of the
    rows its pick reads (the twin: all; Mongo: ``mongo_reads``, where that does not rest on
    the server's index order) and keeps ``check_backlog``. On mongomock the rows are inserted
    oldest due first: it returns documents in the order they were stored, where a server
    walks the ``pending_not_before`` index and so reads the oldest due rows as its window."""
    rng = random.Random(33)
    for n in range(LAYOUTS):
        lay = layout(rng, n, fits=False)
        stored = tuple(sorted(lay.rows, key=lambda r: r.due)) if kit.name == "mongomock" else None
        got = await claim_layout(kit, lay, stored)
        seen = (list(lay.rows), []) if kit.name == "memory" else mongo_reads(lay)
        if seen is not None:
            assert got == [r.key for r in fair_claim(lay, *seen)], described(lay, got, *seen)
        try:
            check_backlog(lay, got)
        except AssertionError as exc:
            raise AssertionError(described(lay, got)) from exc
