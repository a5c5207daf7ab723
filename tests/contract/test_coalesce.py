"""Coalescing per (subscription, card) (issue 33, item 2) on every backend: a burst of edits to
one card launches once, with the newest snapshot, no later than the maximum wait; the superseded
rows end ``coalesced``, pointing at the row that superseded them, counted in the metrics; a row
that already spent its one-shot labels is never coalesced away."""

from __future__ import annotations

import itertools

import pytest

from board_outbox.engine.handlers.coalesce import coalesce_check
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.engine.upkeep.explain import explain
from board_outbox.engine.upkeep.holds.case import ExplainSettings
from board_outbox.engine.work.worker import EffectWorker
from board_outbox.model import transitions as T_
from board_outbox.model.board import Card, EventSnapshot
from board_outbox.model.errors import Superseded
from board_outbox.model.explanation import Coalesced, Coalescing
from board_outbox.model.records import ClaimTerms
from board_outbox.model.rows import CLAIMED, COALESCED, DONE, PENDING, EffectRow, new_subscription_row
from board_outbox.model.subscriptions import Coalesce, MatchRule, Subscription
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

T = "t1"


def _sub(quiet: float = 5.0, max_wait: float = 60.0, **kw: object) -> Subscription:
    return Subscription(sub_id="s1", tenant_id=T, bot="b",
                        rule=MatchRule(event_types=("card.updated",)),
                        coalesce=Coalesce(quiet_seconds=quiet, max_wait_seconds=max_wait),
                        **kw)  # type: ignore[arg-type]


async def _edit(kit: Kit, card: str, title: str, labels: tuple[str, ...] = ()) -> int:
    """One edit of ``card``: its new state, then the event, materialized at once."""
    await kit.cards.put(Card(tenant_id=T, card_id=card, title=title, column="inbox",
                             labels=labels))
    seq = await kit.emit(T, "card.updated", card)
    await kit.tail(seed="earliest").drain_tenant(T)
    return seq


async def _run(kit: Kit, worker: EffectWorker, seconds: float, step: float = 0.5) -> None:
    """Tick the worker every ``step`` seconds of the kit's clock for ``seconds``."""
    for _ in range(int(seconds / step)):
        kit.clock.advance(step)
        await worker.tick_any([T])


def _coalesced_total(metrics: Metrics) -> float:
    return sum(s.value for fam in metrics.prom.registry.collect() for s in fam.samples
               if s.name == "board_outbox_rows_coalesced_total")


async def test_a_burst_on_one_card_launches_once_with_the_newest_event(kit: Kit) -> None:
    await kit.sub(_sub())
    worker = kit.worker()
    worker.metrics = metrics = Metrics()
    seqs = []
    for i in range(10):  # ten edits, 0.5 s apart: well inside the quiet time of 5 s
        seqs.append(await _edit(kit, "c1", f"v{i}"))
        await _run(kit, worker, 0.5)
    rows = await kit.rows(T)
    # the quiet time holds them; the oldest ones, due meanwhile, were superseded
    assert len(rows) == 10 and {r.state for r in rows} <= {PENDING, COALESCED}
    assert kit.launcher.launches == []
    await _run(kit, worker, 10.0)
    assert [(x.card_id, x.seq) for x in kit.launcher.launches] == [("c1", seqs[-1])]
    rows = {r.seq: r for r in await kit.rows(T)}
    last = rows[seqs[-1]]
    assert last.state == DONE and last.event is not None and last.event.title == "v9"
    for s in seqs[:-1]:
        r = rows[s]
        assert r.state == COALESCED and r.attempts == 0 and r.errors == []
        assert r.coalesced_into is not None and rows[int(r.coalesced_into.split("/")[1])].seq > s
        assert r.outcome == f"coalesced into {r.coalesced_into}"
    # every pointer leads to the row that ran
    r = rows[seqs[0]]
    while r.state == COALESCED:
        assert r.coalesced_into is not None
        r = rows[int(r.coalesced_into.split("/")[1])]
    assert r.row_key == last.row_key
    counts = await kit.outbox.count_by_state(T)
    assert counts == {DONE: 1, COALESCED: 9}
    assert await kit.outbox.count_by_state(states=(COALESCED,)) == {COALESCED: 9}
    assert _coalesced_total(metrics) == 9


async def test_two_cards_launch_once_each(kit: Kit) -> None:
    await kit.sub(_sub())
    worker = kit.worker()
    last: dict[str, int] = {}
    for i in range(6):
        for card in ("a", "b"):
            last[card] = await _edit(kit, card, f"{card}{i}")
        await _run(kit, worker, 0.5)
    await _run(kit, worker, 10.0)
    assert sorted((x.card_id, x.seq) for x in kit.launcher.launches) == sorted(last.items())


async def test_rows_born_in_one_batch_launch_once(kit: Kit) -> None:
    """The whole burst is due at once (nothing ticked during it): one claimed batch holds every
    row; the older ones wait for the newest (running), then end coalesced into it."""
    await kit.sub(_sub())
    seqs = [await _edit(kit, "c1", f"v{i}") for i in range(8)]
    kit.clock.advance(6.0)
    worker = kit.worker()
    res = await worker.tick_any([T])
    assert (res.claimed, res.done, res.deferred, res.retried) == (8, 1, 7, 0)
    held = [r for r in await kit.rows(T) if r.state == PENDING]
    assert len(held) == 7  # waiting a moment for the newest, which was running: nothing spent
    assert all(r.attempts == 0 and r.errors == [] and r.waiting is None
               and r.not_before <= kit.clock.now() + 1.0 for r in held)
    await _run(kit, worker, 5.0)
    assert [x.seq for x in kit.launcher.launches] == [seqs[-1]]
    rows = await kit.rows(T)
    assert sorted(r.state for r in rows) == [COALESCED] * 7 + [DONE]
    newest = max(rows, key=lambda r: r.seq)
    assert {r.coalesced_into for r in rows if r.state == COALESCED} == {newest.row_key}


@pytest.mark.parametrize("quiet", [2.0, 8.0])
async def test_a_continuous_stream_launches_about_once_per_max_wait(kit: Kit, quiet: float) -> None:
    max_wait = 10.0
    await kit.sub(_sub(quiet=quiet, max_wait=max_wait))
    worker = kit.worker()
    edits: list[tuple[float, int]] = []
    for i in range(40):  # two edits a second for 40 s, both after the last tick: never quiet
        edits.append((kit.clock.now(), await _edit(kit, "c1", f"v{i}a")))
        kit.clock.advance(0.5)
        edits.append((kit.clock.now(), await _edit(kit, "c1", f"v{i}b")))
        await _run(kit, worker, 0.5, step=0.5)
    await _run(kit, worker, 2 * max_wait, step=0.5)
    launches = kit.launcher.launches
    # the stream ends with the final state launched
    assert launches[-1].seq == edits[-1][1]
    done = sorted((r.done_at.timestamp(), r.seq) for r in await kit.rows(T)
                  if r.state == DONE and r.done_at is not None)
    assert len(done) == len(launches)
    # about one launch per max wait while the stream lasts (then one for its end): never two
    # of one burst
    times = [t for t, _s in done]
    assert 4 <= len(times) <= 5, times
    assert all(b - a >= max_wait - 1.0 for a, b in itertools.pairwise(times[:-1])), times
    # every edit is followed, within the maximum wait (and the two claim rounds the deadline
    # takes: the row that finds it passed, then the chosen row), by a launch at least as new
    for at, seq in edits:
        first = next(t for t, s in done if s >= seq)
        assert first - at <= max_wait + 1.0, (seq, at, first)  # two claim rounds of slack


async def test_a_row_that_spent_its_labels_is_never_coalesced(kit: Kit) -> None:
    await kit.sub(_sub(consume_labels=("go",)))
    worker = kit.worker()
    first = await _edit(kit, "c1", "v0", labels=("go",))
    kit.faults.fail_at("launcher.launch")  # the first launch fails after the labels were spent
    await _run(kit, worker, 5.5)
    [row] = await kit.rows(T)
    assert row.consume_marked and row.state == PENDING and row.attempts == 1
    card = await kit.cards.get(T, "c1")
    assert card.labels == ()
    # newer edits of the card (the labels are back on it) while the first row retries
    newer = [await _edit(kit, "c1", f"v{i}", labels=("go",)) for i in (1, 2)]
    await _run(kit, worker, 30.0)
    rows = {r.seq: r for r in await kit.rows(T)}
    assert rows[first].state == DONE and rows[first].outcome is not None
    assert rows[first].outcome.startswith("launched")  # launched, not coalesced away
    launched = [x.seq for x in kit.launcher.launches]
    assert first in launched and newer[-1] in launched
    assert rows[newer[0]].state == COALESCED


async def test_coalescing_is_off_by_default(kit: Kit) -> None:
    await kit.sub(Subscription(sub_id="s1", tenant_id=T, bot="b",
                               rule=MatchRule(event_types=("card.updated",))))
    worker = kit.worker()
    seqs = [await _edit(kit, "c1", f"v{i}") for i in range(3)]
    await _run(kit, worker, 2.0)
    assert sorted(x.seq for x in kit.launcher.launches) == seqs
    assert all(r.burst_at is None for r in await kit.rows(T))


async def test_explain_names_the_quiet_window_and_the_row_that_ran(kit: Kit) -> None:
    await kit.sub(_sub())
    worker = kit.worker()
    a = await _edit(kit, "c1", "v0")
    kit.clock.advance(1.0)
    b = await _edit(kit, "c1", "v1")
    key_a, key_b = f"{T}/{a}/sub/s1", f"{T}/{b}/sub/s1"
    x = await explain(kit.stores, key_a, kit.clock.now(), ExplainSettings())
    assert [h.name for h in x.holds][:1] == ["coalescing"]
    hold = x.holds[0]
    assert isinstance(hold, Coalescing) and hold.until > kit.clock.now()
    await _run(kit, worker, 10.0)
    x = await explain(kit.stores, key_a, kit.clock.now(), ExplainSettings())
    hold = x.holds[0]
    assert isinstance(hold, Coalesced) and hold.into == key_b
    assert [m.what for m in x.timeline][-1] == COALESCED


async def test_past_its_deadline_a_burst_chooses_its_newest_row_once(kit: Kit) -> None:
    """At the deadline the newest row is chosen (due at once, its burst closed): it launches
    whatever is newer by then, and the older rows end coalesced into it -- not into a row newer
    than it, which would launch the same burst a second time."""
    sub = _sub(quiet=1.0, max_wait=10.0)
    window = sub.coalesce
    assert window is not None
    t0 = kit.clock.now()

    def row(i: int) -> EffectRow:
        return new_subscription_row(T, EventSnapshot(seq=i, type="card.updated", card_id="c1"),
                                    sub, t0 + i)

    rows = [row(i) for i in (1, 2, 3)]
    await kit.outbox.upsert_rows(rows)
    now = t0 + 20.0  # past the deadline of the burst that began at t0 + 1
    with pytest.raises(Superseded) as exc:
        await coalesce_check(rows[0], window, kit.outbox, now)
    assert exc.value.into == rows[2].row_key
    [chosen] = [r for r in await kit.rows(T) if r.seq == 3]
    assert chosen.burst_closed and chosen.burst_at == t0 + 1 and chosen.not_before <= now
    await kit.outbox.upsert_rows([row(4)])  # an edit after the choice
    with pytest.raises(Superseded) as exc:
        await coalesce_check(rows[1], window, kit.outbox, now)
    assert exc.value.into == rows[2].row_key  # the chosen row, not the newest
    await coalesce_check(chosen, window, kit.outbox, now + 0.5)  # returns: it launches
    [newer] = [r for r in await kit.rows(T) if r.seq == 4]
    assert not newer.burst_closed and newer.burst_at == now + 0.5  # the next burst begins


async def test_a_coalescing_row_is_never_born_claimed(kit: Kit) -> None:
    """The tail hands the rows it writes to its worker born claimed; a coalescing row waits its
    quiet time instead (born pending), a plain row beside it is still handed over."""
    sub = _sub()
    plain = Subscription(sub_id="s2", tenant_id=T, bot="b")
    t0 = kit.clock.now()
    ev = EventSnapshot(seq=1, type="card.updated", card_id="c1")
    rows = [new_subscription_row(T, ev, sub, t0), new_subscription_row(T, ev, plain, t0)]
    res = await kit.outbox.upsert_rows(rows, claim=ClaimTerms(claim_id="k", lease_until=t0 + 30))
    assert [c.row.row_key for c in res.claims if c.row is not None] == [rows[1].row_key]
    states = {r.sub_id: r.state for r in await kit.rows(T)}
    assert states == {"s1": PENDING, "s2": CLAIMED}


async def test_a_burst_is_one_subscriptions_never_another_ones_on_the_same_card(kit: Kit) -> None:
    """Two coalescing subscriptions on one card: each coalesces only its own rows. s1 matches
    the first edit only (its label); s2 both: s1's one row launches -- s2's newer row is no
    row of s1's burst, and superseding s1's row by it would lose s1's launch."""
    window = Coalesce(quiet_seconds=5.0, max_wait_seconds=60.0)
    await kit.sub(Subscription(sub_id="s1", tenant_id=T, bot="b", coalesce=window,
                               rule=MatchRule(event_types=("card.updated",), labels_all=("x",))))
    await kit.sub(Subscription(sub_id="s2", tenant_id=T, bot="b", coalesce=window,
                               rule=MatchRule(event_types=("card.updated",))))
    first = await _edit(kit, "c1", "v0", labels=("x",))
    second = await _edit(kit, "c1", "v1")
    worker = kit.worker()
    await _run(kit, worker, 10.0)
    assert sorted((x.sub_id, x.seq) for x in kit.launcher.launches) == [
        ("s1", first), ("s2", second)]
    rows = {(r.sub_id, r.seq): r for r in await kit.rows(T)}
    assert rows["s1", first].state == DONE
    assert rows["s2", first].state == COALESCED
    assert rows["s2", first].coalesced_into == rows["s2", second].row_key


async def test_the_carry_is_fenced_on_the_newer_row_still_pending(kit: Kit) -> None:
    """``carry_burst`` moves a newer row's burst only while that row is pending: a row claimed
    meanwhile (its launch under way) is left as it is, and False tells the older row to wait."""
    sub = _sub(quiet=1.0, max_wait=10.0)
    t0 = kit.clock.now()
    newer = new_subscription_row(T, EventSnapshot(seq=2, type="card.updated", card_id="c1"),
                                 sub, t0)
    await kit.outbox.upsert_rows([newer])
    [c] = await kit.outbox.claim_any(t0 + 5.0, 30.0, 10)
    assert c.row is not None and c.row.row_key == newer.row_key
    before = await kit.raw_row(newer.row_key)
    assert not await kit.outbox.carry_burst(newer.row_key, burst_at=t0 - 50.0, due_by=t0 - 40.0,
                                            now=t0 + 5.0, close=True)
    assert await kit.raw_row(newer.row_key) == before  # nothing written
    [row] = await kit.rows(T)
    assert (row.state, row.burst_at, row.burst_closed) == (CLAIMED, t0, False)
    # pending, it is carried: the burst's start and deadline lowered, the burst closed
    assert await kit.outbox.apply_claimed(c.ref, c.claim_id,
                                          T_.coalesce_hold(now=t0 + 5.0, not_before=t0 + 6.0))
    assert await kit.outbox.carry_burst(newer.row_key, burst_at=t0 - 50.0, due_by=t0 - 40.0,
                                        now=t0 + 5.0, close=True)
    [row] = await kit.rows(T)
    assert (row.state, row.burst_at, row.not_before, row.burst_closed) == (
        PENDING, t0 - 50.0, t0 - 40.0, True)
