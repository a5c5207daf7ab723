"""Issue 31: the tail takes the next events from the change stream's own documents instead of
reading them again, only from a buffer a complete read has vouched for (``StreamEvents``), and
materializes exactly what a read would have. The buffer's rules one by one, the tail with a
buffer against the same tail reading, and a running service on the memory twins and on the wire
whose trickled events are launched without an events read or a subscription re-read each."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.engine.flow.membership import owner
from board_outbox.engine.tail.prefetch import StreamEvents
from board_outbox.model.board import Card
from board_outbox.model.errors import StoreUnavailable
from board_outbox.model.records import Change
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import Stores
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from tests.support.kits import memory_kit
from tests.test_stream_scope import eventually
from tests.test_tail_roundtrips import Counting

pytestmark = pytest.mark.anyio
T = "t1"


def doc(seq: int, tenant: str = T) -> dict[str, Any]:
    return {"tenant_id": tenant, "seq": seq, "type": "card.created", "card_id": "c", "at": 0.0}


def trusted(buf: StreamEvents, tenant: str = T) -> StreamEvents:
    buf.end_read(tenant, buf.begin_read(tenant))
    return buf


# -- the buffer's rules ------------------------------------------------------------------------

def test_an_untrusted_buffer_serves_nothing() -> None:
    buf = StreamEvents()
    buf.offer(T, 1, doc(1))
    assert buf.take(T, 0, 10) is None  # no complete read since it exists: the store serves


def test_a_trusted_buffer_serves_the_run_after_the_cursor_up_to_a_hole() -> None:
    buf = trusted(StreamEvents())
    for seq in (1, 2, 3, 5):  # 4 not delivered yet
        buf.offer(T, seq, doc(seq))
    got = buf.take(T, 0, 10)
    assert got is not None and [r.seq for r in got] == [1, 2, 3]
    assert got[0].doc == doc(1) and buf.served == 3
    assert buf.take(T, 3, 10) is None  # 4 missing: the store reads it (and 5)
    buf.offer(T, 4, doc(4))
    got = buf.take(T, 3, 10)
    assert got is not None and [r.seq for r in got] == [4, 5]


def test_a_hole_at_the_front_and_a_limit() -> None:
    buf = trusted(StreamEvents())
    for seq in (3, 4, 5):
        buf.offer(T, seq, doc(seq))
    assert buf.take(T, 1, 10) is None  # 2 missing
    got = buf.take(T, 2, 2)
    assert got is not None and [r.seq for r in got] == [3, 4]
    assert buf.take(T, 0, 10) is None  # served events left: an aborted batch reads the store


def test_seqs_at_or_below_the_cursor_are_dropped() -> None:
    buf = trusted(StreamEvents())
    for seq in (1, 2, 3):
        buf.offer(T, seq, doc(seq))
    got = buf.take(T, 2, 10)
    assert got is not None and [r.seq for r in got] == [3] and len(buf) == 0


def test_trust_needs_a_read_that_began_after_the_buffer_and_survives_no_drop() -> None:
    buf = StreamEvents()
    gen = buf.begin_read(T)
    buf.clear()  # the stream reopened while the read ran
    buf.end_read(T, gen)
    buf.offer(T, 1, doc(1))
    assert not buf.trusted(T) and buf.take(T, 0, 10) is None
    gen = buf.begin_read(T)
    buf.forget(T)  # the tenant changed owner meanwhile
    buf.end_read(T, gen)
    assert not buf.trusted(T)
    buf.end_read(T, buf.begin_read(T))
    assert buf.trusted(T)


def test_a_read_that_began_with_an_older_buffer_earns_the_new_one_nothing() -> None:
    """The stream reopened (or the tenant changed owner and came back) while a read ran, and
    the new stream delivered already: that new buffer is not vouched for by the older read."""
    for drop in (StreamEvents.clear, lambda b: b.forget(T)):
        buf = StreamEvents()
        gen = buf.begin_read(T)
        drop(buf)
        buf.offer(T, 7, doc(7))  # the new stream's first delivery: a new buffer
        buf.end_read(T, gen)
        assert not buf.trusted(T) and buf.take(T, 6, 10) is None


def test_clear_and_forget_take_back_the_trust_a_read_earned() -> None:
    for drop in (StreamEvents.clear, lambda b: b.forget(T)):
        buf = trusted(StreamEvents())
        buf.offer(T, 1, doc(1))
        drop(buf)
        assert not buf.trusted(T) and len(buf) == 0
        buf.offer(T, 2, doc(2))  # delivered after: held, but not served until a read vouches
        assert buf.take(T, 1, 10) is None


def test_a_buffer_over_its_bound_loses_its_trust() -> None:
    buf = trusted(StreamEvents(per_tenant=3))
    for seq in range(1, 5):  # the 4th overflows: deliveries 1-3 are dropped
        buf.offer(T, seq, doc(seq))
    assert not buf.trusted(T) and buf.dropped == 1 and buf.take(T, 3, 10) is None


def test_the_total_bound_drops_the_least_recently_used_tenant() -> None:
    buf = StreamEvents(total=4)
    trusted(buf, "a")
    trusted(buf, "b")
    for seq in (1, 2):
        buf.offer("a", seq, doc(seq, "a"))
        buf.offer("b", seq, doc(seq, "b"))
    buf.offer("b", 3, doc(3, "b"))  # over the total: "a" was used least recently
    assert not buf.trusted("a") and buf.trusted("b") and len(buf) == 3
    got = buf.take("b", 0, 10)
    assert got is not None and [r.seq for r in got] == [1, 2, 3]


@pytest.mark.parametrize("seq", [2.5, -1, True, "3", None])
def test_a_seq_that_is_not_an_int_seq_is_left_to_the_read_path(seq: Any) -> None:
    buf = trusted(StreamEvents())
    buf.offer(T, seq, {"seq": seq})
    assert len(buf) == 0


# -- the tail with a buffer --------------------------------------------------------------------

async def test_the_tail_takes_a_trusted_run_and_reads_only_past_a_hole() -> None:
    kit = memory_kit()
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await kit.card(T, "c")
    calls: dict[str, int] = {}
    kit.events = Counting(kit.events, calls)  # type: ignore[assignment]
    tail = kit.tail(seed="earliest", batch_size=100)
    tail.streamed = buf = StreamEvents()
    await kit.emit(T, "card.created", "c")
    first = await tail.drain_tenant(T)  # a read: complete, so the buffer is trusted from here
    assert first.streamed == 0 and first.materialized == 1 and buf.trusted(T)
    reads = calls.get("read_after", 0)
    for _ in range(3):
        seq = await kit.emit(T, "card.created", "c")
        buf.offer(T, seq, doc(seq))
    res = await tail.drain_tenant(T)
    assert (res.streamed, res.materialized, res.cursor_after) == (3, 3, 4)
    assert calls.get("read_after", 0) == reads  # no read: the stream's documents served
    # an insert the buffer never saw (delivered before it was trusted, say) is read
    await kit.emit(T, "card.created", "c")
    res = await tail.drain_tenant(T)
    assert res.streamed == 0 and res.materialized == 1 and calls["read_after"] == reads + 1
    rows = await kit.outbox.count_by_state()
    assert sum(rows.values()) == 5  # one row per event, each once


async def test_an_untrusted_buffer_never_ends_a_drain_early() -> None:
    """Five events in the store, the buffer holding only the first: without trust the tail
    reads, and all five are materialized in one batch."""
    kit = memory_kit()
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await kit.card(T, "c")
    for _ in range(5):
        await kit.emit(T, "card.created", "c")
    tail = kit.tail(seed="earliest", batch_size=100)
    tail.streamed = buf = StreamEvents()
    buf.offer(T, 1, doc(1))
    res = await tail.drain_tenant(T)
    assert (res.streamed, res.materialized, res.cursor_after) == (0, 5, 5)


async def test_a_malformed_streamed_document_costs_only_itself() -> None:
    kit = memory_kit()
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await kit.card(T, "c")
    tail = kit.tail(seed="earliest", batch_size=100)
    tail.streamed = buf = trusted(StreamEvents())
    for _ in range(3):
        await kit.emit(T, "card.created", "c")
    buf.offer(T, 1, doc(1))
    buf.offer(T, 2, {"tenant_id": T, "seq": 2, "type": 7, "card_id": ["x"]})  # wrong types
    buf.offer(T, 3, doc(3))
    res = await tail.drain_tenant(T)
    assert res.streamed == 3 and res.stopped == "poison" and res.cursor_after == 1
    # the store's own copy of seq 2 is fine: the next batch reads it, nothing is lost
    res = await tail.drain_tenant(T)
    assert res.streamed == 0 and res.cursor_after == 3


# -- the waker feeding the buffer ----------------------------------------------------------------

class TwoStreams:
    """A change feed whose first stream delivers seq 1, then fails when told; the second (the
    reopen) delivers seq 5 and stays open."""

    def __init__(self) -> None:
        self.opens = 0
        self.fail = anyio.Event()
        self.second = anyio.Event()

    async def watch(self, resume_token: Any, *, exclude: Any = (),
                    pace: Any = None) -> AsyncGenerator[Change, None]:
        self.opens += 1
        if self.opens == 1:
            yield Change(T, 1, "tok1", doc(1))
            await self.fail.wait()
            raise StoreUnavailable("stream interrupted")
        yield Change(T, 5, "tok2", doc(5))
        self.second.set()
        await anyio.sleep_forever()

    async def history_start(self) -> float | None:
        return None


def service_on(feed: Any) -> Service:
    stores = dataclasses.replace(MemoryBackend().stores(), feed=feed)
    cfg = load_config(env={}, projections=[],  # type: ignore[arg-type]
                      tail={"poll_interval_seconds": 60, "seed": "earliest"})
    return Service(stores, cfg, rng=random.Random(1))


async def test_a_reopened_stream_starts_an_untrusted_buffer() -> None:
    """Deliveries between two streams may be lost: the new stream's first change drops what
    the buffer held and the trust it had earned."""
    feed = TwoStreams()
    service = service_on(feed)
    buf = service.tail.streamed
    assert buf is not None
    async with anyio.create_task_group() as tg:
        tg.start_soon(service._waker_loop)
        await eventually(lambda: len(buf) == 1)
        buf.end_read(T, buf.begin_read(T))  # a complete read since: trusted
        assert buf.trusted(T)
        feed.fail.set()
        await eventually(feed.second.is_set)
        assert not buf.trusted(T) and len(buf) == 1 and buf.take(T, 4, 10) is None
        tg.cancel_scope.cancel()


async def test_a_tenant_another_replica_owns_now_loses_its_buffer() -> None:
    """Its deliveries stop here (the stream leaves it out): what the buffer holds, and the trust
    it earned, go at its first change seen after the ownership moved."""
    service = service_on(TwoStreams())
    buf = service.tail.streamed
    assert buf is not None
    service.on_change(Change(T, 1, "a", doc(1)))
    buf.end_read(T, buf.begin_read(T))
    assert buf.trusted(T) and len(buf) == 1
    me = service.ownership.member_id
    other = next(m for m in (f"r{i}" for i in range(100)) if owner([me, m], T) == m)
    service.ownership.set_members([me, other])
    service.on_change(Change(T, 2, "b", doc(2)))  # delivered before the stream is rescoped
    assert not buf.trusted(T) and len(buf) == 0
    service.ownership.set_members([me])  # back: the deliveries it missed are read, not served
    service.on_change(Change(T, 3, "c", doc(3)))
    assert buf.take(T, 0, 10) is None and buf.take(T, 2, 10) is None


# -- a running service ---------------------------------------------------------------------------

async def trickle(stores: Stores, count: int) -> Service:
    await stores.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await stores.cards.put(Card(tenant_id=T, card_id="c"))  # type: ignore[attr-defined]
    cfg = load_config(env={}, projections=[],  # type: ignore[arg-type]
                      tail={"poll_interval_seconds": 60, "seed": "earliest"})
    calls: dict[str, int] = {}
    stores = dataclasses.replace(stores, events=Counting(stores.events, calls),  # type: ignore[arg-type]
                                 subs=Counting(stores.subs, calls))
    service = Service(stores, cfg, rng=random.Random(1))

    async def emit() -> None:
        seq = await stores.events.allocate_seq(T)
        await stores.events.insert(doc(seq))  # type: ignore[attr-defined]

    async def done(n: int) -> bool:
        return (await stores.outbox.count_by_state()).get("done", 0) == n

    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await eventually(lambda: service.stream_open)
        await emit()  # the first wake reads (trust is earned by a read after the stream opened)
        await eventually(lambda: done(1))
        buf = service.tail.streamed
        assert buf is not None
        await eventually(lambda: buf.trusted(T))
        reads = calls.get("read_after", 0)
        rechecks = calls.get("get_many", 0) + calls.get("get", 0)
        for i in range(count):
            await emit()
            await eventually(lambda i=i: done(2 + i))  # type: ignore[misc]
        served = buf.served
        service.stop()
    assert served == count  # every trickled event came from the stream's document
    assert calls.get("read_after", 0) - reads <= count // 4  # polls may still read now and then
    # the launch re-check (M10b) was served from the subscriptions the tail had just read
    assert calls.get("get_many", 0) + calls.get("get", 0) - rechecks <= count // 4
    assert service.subscriptions is not None and service.subscriptions.hits >= count
    return service


async def test_trickled_events_come_from_the_stream_memory() -> None:
    backend = MemoryBackend()
    backend.events.quiet_seconds = 0.2
    await trickle(backend.stores(), 12)


@pytest.mark.live_mongo
async def test_trickled_events_come_from_the_stream_on_the_wire(live_db: Any) -> None:
    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo.client import mongo_stores

    await trickle(mongo_stores(live_db, MemoryLauncher()), 12)
