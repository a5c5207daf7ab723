"""The rolling series (issue 33, item 6) on every backend (memory, mongomock, the wire): one
document per (minute, replica), idempotent flushes, a window read in one bounded query with
the lag of the tenants asked for only, documents that carry their own end (TTL), a failed flush
carried to the next minute (not lost, not doubled), and replicas merged (``engine/upkeep/series``)."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from board_outbox.engine.upkeep.series import SeriesRecorder, SeriesSettings, read_window
from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.series import (
    MINUTE,
    SERIES_COLLECTION,
    SeriesCounts,
    SeriesPoint,
    minute_of,
    series_id,
)
from board_outbox.ports import SeriesStore
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

HOSTILE = ("$where", "$$ROOT", "a.b", "<script>alert(1)</script>", "t\u00e9\u00e9", "")


def _series(kit: Kit) -> SeriesStore:
    assert kit.series is not None
    return kit.series


def _counts(m: int, d: int = 0, x: int = 0) -> SeriesCounts:
    return SeriesCounts(materialized=m, done=d, dead=x)


def _point(minute: int, replica: str = "r1", counts: SeriesCounts | None = None,
           base: SeriesCounts | None = None, lag: dict[str, int] | None = None) -> SeriesPoint:
    listed = tuple(sorted((lag or {}).items(), key=lambda p: (-p[1], p[0])))
    return SeriesPoint(minute=minute, replica=replica, counts=counts or _counts(0),
                       base=base or _counts(0), lag_total=sum(n for _t, n in listed),
                       behind=len(listed), lag=listed, listed=len(listed))


def _m0(kit: Kit) -> int:
    return minute_of(kit.clock.now())


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return float(value)


async def test_one_document_per_minute_and_replica_read_back_by_window(kit: Kit) -> None:
    store, m0 = _series(kit), _m0(kit)
    for i in range(4):
        for r in ("r1", "r2"):
            await store.flush(_point(m0 + i * MINUTE, r, _counts(10 * (i + 1))), m0 + 3600)
    got = await store.read(m0 + MINUTE, m0 + 3 * MINUTE)  # since inclusive, until exclusive
    assert [(p.minute, p.replica) for p in got] == [
        (m0 + MINUTE, "r1"), (m0 + MINUTE, "r2"), (m0 + 2 * MINUTE, "r1"), (m0 + 2 * MINUTE, "r2")]
    assert all(p.counts.materialized == 10 * ((p.minute - m0) // MINUTE + 1) for p in got)
    assert await store.read(m0 + 10 * MINUTE, m0 + 20 * MINUTE) == []


async def test_a_repeated_flush_keeps_the_larger_counts_and_the_smaller_base(kit: Kit) -> None:
    store, m0 = _series(kit), _m0(kit)
    await store.flush(_point(m0, counts=_counts(10, 5, 1), base=_counts(4, 2, 0),
                             lag={"a": 3}), m0 + 3600)
    await store.flush(_point(m0, counts=_counts(10, 5, 1), base=_counts(4, 2, 0),
                             lag={"a": 3}), m0 + 3600)  # the same flush again: no change
    [p] = await store.read(m0, m0 + MINUTE)
    assert (p.counts, p.base) == (_counts(10, 5, 1), _counts(4, 2, 0))
    # a later flush into the same minute (the shutdown's): larger counts, the older base stays
    await store.flush(_point(m0, counts=_counts(12, 7, 1), base=_counts(10, 5, 1),
                             lag={"b": 9}), m0 + 3600)
    [p] = await store.read(m0, m0 + MINUTE)
    assert (p.counts, p.base) == (_counts(12, 7, 1), _counts(4, 2, 0))
    assert p.lag == (("b", 9),) and (p.lag_total, p.behind, p.listed) == (9, 1, 1)


async def test_the_lag_read_lists_only_the_tenants_asked_for_even_hostile_ids(kit: Kit) -> None:
    store, m0 = _series(kit), _m0(kit)
    lag = {t or "empty": 5 + i for i, t in enumerate(HOSTILE)} | {"plain": 1, "other": 2}
    await store.flush(_point(m0, lag=lag), m0 + 3600)
    [every] = await store.read(m0, m0 + MINUTE, None)
    assert dict(every.lag) == lag
    wanted = ["$where", "$$ROOT", "a.b", "<script>alert(1)</script>", "plain", "nobody"]
    [some] = await store.read(m0, m0 + MINUTE, wanted)
    assert dict(some.lag) == {t: lag[t] for t in wanted if t in lag}
    assert some.listed == len(lag) and some.behind == len(lag)  # the figures are the stored ones
    [none] = await store.read(m0, m0 + MINUTE, ())
    assert none.lag == () and none.lag_total == sum(lag.values())


async def test_a_read_returns_the_newest_documents_up_to_its_limit(kit: Kit) -> None:
    store, m0 = _series(kit), _m0(kit)
    for i in range(10):
        await store.flush(_point(m0 + i * MINUTE, counts=_counts(i)), m0 + 3600)
    got = await store.read(m0, m0 + 10 * MINUTE, (), limit=3)
    assert [p.minute for p in got] == [m0 + 7 * MINUTE, m0 + 8 * MINUTE, m0 + 9 * MINUTE]


async def test_each_document_carries_its_end_and_the_expired_ones_go(kit: Kit) -> None:
    store, m0 = _series(kit), _m0(kit)
    assert kit.raw_series is not None
    await store.flush(_point(m0 - 10 * MINUTE), m0 - 5 * MINUTE)  # already past its end
    await store.flush(_point(m0), m0 + 6 * 3600)
    doc = await kit.raw_series(series_id(m0, "r1"))
    assert doc is not None and _epoch(doc["expire_at"]) == m0 + 6 * 3600
    if kit.name == "memory":  # the twin drops expired documents at each flush
        assert await kit.raw_series(series_id(m0 - 10 * MINUTE, "r1")) is None
    else:  # Mongo: the TTL index on the date ``expire_at`` (its monitor runs every minute)
        old = await kit.raw_series(series_id(m0 - 10 * MINUTE, "r1"))
        assert old is None or isinstance(old["expire_at"], datetime)
        from board_outbox.adapters.mongo.schema import INDEXES

        [ttl] = [m.document for m in INDEXES[SERIES_COLLECTION]
                 if "expireAfterSeconds" in m.document]
        assert ttl["key"] == {"expire_at": 1} and ttl["expireAfterSeconds"] == 0


# (minute: an offset from now's minute, or a value planted as it is; the rest of the document)
@pytest.mark.parametrize(("minute", "doc"), [
    ("soon", {"replica": "r", "counts": {}}),
    (61, {"replica": "r", "counts": {}}),  # not the start of a minute
    (0.0, {"replica": "r", "counts": {}}),  # a float
    (0, {"replica": 7, "counts": {}}),
    (0, {"replica": "r", "counts": "lots"}),
    (0, {"replica": "r", "counts": {"done": -1}}),
    (0, {"replica": "r", "counts": {"done": 1.5}}),
    (0, {"replica": "r", "counts": {}, "base": {"dead": True}}),
    (0, {"replica": "r", "counts": {}, "lag": "a lot"}),
    (0, {"replica": "r", "counts": {}, "lag": [{"t": 5, "n": 1}]}),
    (0, {"replica": "r", "counts": {}, "lag": [["a", 1]]}),
    (0, {"replica": "r", "counts": {}, "lag_total": "x"}),
    (0, {"replica": "r", "counts": {}, "lag": [{"t": "a", "n": 1}] * 10_001}),
])
async def test_a_document_that_does_not_parse_costs_only_itself(
        kit: Kit, minute: object, doc: dict[str, Any]) -> None:
    assert kit.put_raw_series is not None
    store, m0 = _series(kit), _m0(kit)
    key = f"bad-{random.randrange(10**9)}"
    planted = m0 + minute if isinstance(minute, (int, float)) else minute
    in_window = planted is not minute
    await kit.put_raw_series(key, {**doc, "minute": planted})
    await store.flush(_point(m0, "good", _counts(3)), m0 + 3600)
    got = await store.read(m0 - MINUTE, m0 + 2 * MINUTE, None)
    assert [(p.replica, p.counts.materialized) for p in got] == [("good", 3)]
    # in the window: read, refused and reported, once; out of it (a string minute): not read
    assert any(d.collection == SERIES_COLLECTION and d.key == key
               for d in BAD_DOCUMENTS.current()) == in_window


def _recorder(kit: Kit, replica: str, counts: dict[str, SeriesCounts],
              lag: dict[str, dict[str, int]], **settings: Any) -> SeriesRecorder:
    return SeriesRecorder(_series(kit), kit.clock, replica, SeriesSettings(**settings),
                          counts=lambda: counts[replica], lag=lambda: lag.get(replica, {}))


async def test_a_failed_flush_is_carried_to_the_next_minute_not_lost(kit: Kit) -> None:
    kit.clock.set(float(_m0(kit)) + 5)
    counts = {"r1": _counts(0)}
    rec = _recorder(kit, "r1", counts, {})
    m0 = rec.minute
    counts["r1"] = _counts(10, 8, 1)
    kit.faults.fail_at("series.flush")  # the store refuses minute m0's flush
    kit.clock.advance(MINUTE)
    assert not await rec.flush_due()
    assert not await rec.flush_due()  # not retried within the minute: one write a minute
    counts["r1"] = _counts(25, 20, 2)
    kit.clock.advance(MINUTE)
    assert await rec.flush_due()
    window = await read_window(_series(kit), kit.clock.now(), 3)
    assert m0 not in window.figures  # nothing written for it...
    assert window.figures[m0 + MINUTE].counts == _counts(25, 20, 2)  # ...it went with the next
    assert sum(window.counts("materialized")) == 25
    assert kit.faults.hits["series.flush"] == 2  # two writes in two minutes, never more


async def test_a_flush_that_landed_but_was_reported_failed_is_not_counted_twice(
        kit: Kit) -> None:
    kit.clock.set(float(_m0(kit)) + 5)
    counts = {"r1": _counts(0)}
    rec = _recorder(kit, "r1", counts, {})
    m0 = rec.minute
    counts["r1"] = _counts(10, 10)
    kit.faults.fail_at("series.flush.after")  # written, but the reply is lost
    kit.clock.advance(MINUTE)
    assert not await rec.flush_due()
    counts["r1"] = _counts(15, 14)
    kit.clock.advance(MINUTE)
    assert await rec.flush_due()
    window = await read_window(_series(kit), kit.clock.now(), 3)
    assert window.figures[m0].counts == _counts(10, 10)
    assert window.figures[m0 + MINUTE].counts == _counts(5, 4)  # not 15, 14
    assert sum(window.counts("done")) == 14


async def test_replicas_are_merged_counts_summed_lag_per_tenant_the_largest(kit: Kit) -> None:
    kit.clock.set(float(_m0(kit)) + 5)
    counts = {"r1": _counts(0), "r2": _counts(0)}
    lag = {"r1": {"a": 5, "b": 2, "ok": 0}, "r2": {"c": 7, "a": 6}}  # a: moving between owners
    recs = [_recorder(kit, r, counts, lag, max_tenants=2) for r in ("r1", "r2")]
    m0 = recs[0].minute
    counts.update(r1=_counts(3, 2, 1), r2=_counts(4, 4))
    kit.clock.advance(MINUTE)
    for rec in recs:
        assert await rec.flush_due()
    window = await read_window(_series(kit), kit.clock.now(), 2, None)
    fig = window.figures[m0]
    assert fig.counts == _counts(7, 6, 1) and fig.replicas == 2
    assert fig.lag == {"a": 6, "b": 2, "c": 7}
    assert (fig.lag_total, fig.behind) == (20, 4)
    assert fig.tenant_lag("ok") == 0  # no list was cut: a tenant not listed is not behind
    window = await read_window(_series(kit), kit.clock.now(), 2, ["c"])
    assert window.tenant_lag("c") == [None, 7]  # the minute before: no replica wrote


async def test_a_list_cut_at_max_tenants_leaves_the_others_unknown(kit: Kit) -> None:
    kit.clock.set(float(_m0(kit)) + 5)
    lag = {"r1": {f"t{i}": i + 1 for i in range(5)}}
    rec = _recorder(kit, "r1", {"r1": _counts(0)}, lag, max_tenants=2)
    kit.clock.advance(MINUTE)
    assert await rec.flush_due()
    window = await read_window(_series(kit), kit.clock.now(), 1, None)
    [fig] = window.figures.values()
    assert fig.lag == {"t4": 5, "t3": 4} and fig.capped
    assert (fig.lag_total, fig.behind) == (15, 5)  # the totals cover every tenant behind
    assert fig.tenant_lag("t0") is None and fig.tenant_lag("t4") == 5
