"""The row search (A8, ``EffectOutbox.search``) on every backend: each form finds exactly its
rows, newest first, within its limit; another tenant's rows never; a row that does not decode
is left out and named."""

from __future__ import annotations

import pytest

from board_outbox.model.codec import unreadable
from board_outbox.model.search import RowQuery
from board_outbox.model.subscriptions import MatchRule, Subscription
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

SUBS = (Subscription(sub_id="s", tenant_id="t1", bot="b", rule=MatchRule()),
        Subscription(sub_id="o", tenant_id="t2", bot="b", rule=MatchRule()))


async def _plant(kit: Kit) -> None:
    for sub in SUBS:
        await kit.sub(sub)
    for tenant in ("t1", "t2"):
        for i in range(1, 7):
            await kit.card(tenant, f"c{i % 3}")
            await kit.emit(tenant, "card.created", f"c{i % 3}")
        await kit.tail(seed="earliest").drain_all([tenant])


def _seqs(rows: list[object]) -> list[int]:
    return [r.seq for r in rows]  # type: ignore[attr-defined]


async def test_each_form_finds_its_rows_newest_first(kit: Kit) -> None:
    await _plant(kit)
    card = await kit.outbox.search(RowQuery(form="card", tenant="t1", card="c1"))
    assert _seqs(card) == [4, 1] and {r.tenant_id for r in card} == {"t1"}
    event = await kit.outbox.search(RowQuery(form="event", tenant="t2", seq_from=5, seq_to=5))
    assert [r.row_key for r in event] == ["t2/5/sub/o"]
    ranged = await kit.outbox.search(RowQuery(form="seq_range", tenant="t1", seq_from=2,
                                              seq_to=5, limit=3))
    assert _seqs(ranged) == [5, 4, 3]
    one = await kit.outbox.search(RowQuery(form="row_key", row_key="t1/3/sub/s"))
    assert [r.row_key for r in one] == ["t1/3/sub/s"]
    assert await kit.outbox.search(RowQuery(form="row_key", row_key="t1/99/sub/s")) == []
    await kit.worker(batch_size=4).tick_any()  # some done, the rest pending
    done = await kit.outbox.search(RowQuery(form="state", state="done"))
    pending = await kit.outbox.search(RowQuery(form="state", state="pending", limit=100))
    assert len(done) == 4 and len(pending) == 8 and all(r.state == "pending" for r in pending)
    mine = await kit.outbox.search(RowQuery(form="state", state="pending", tenant="t2"))
    assert {r.tenant_id for r in mine} == {"t2"} and mine
    t1_done = await kit.outbox.search(RowQuery(form="state", state="done", tenant="t1"))
    assert {r.tenant_id for r in t1_done} == {"t1"}
    assert _seqs(t1_done) == sorted(_seqs(t1_done), reverse=True)


async def test_a_row_that_does_not_decode_is_left_out_and_named(kit: Kit) -> None:
    await _plant(kit)
    await kit.insert_raw_row({"tenant_id": "t1", "row_key": "t1/7/sub/s", "seq": 7,
                              "state": "done", "attempts": "many", "updated_at": 1.0,
                              "event": {"seq": 7, "type": "card.created", "card_id": "c1"}})
    with unreadable() as bad:
        rows = await kit.outbox.search(RowQuery(form="card", tenant="t1", card="c1"))
    assert _seqs(rows) == [4, 1] and [e.ref for e in bad] == ["t1/7/sub/s"]
