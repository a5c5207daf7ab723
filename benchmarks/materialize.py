"""Materialization throughput (events/s: normalize + match + upsert + cursor CAS), side by side
with its ceiling -- a raw unordered bulk write of the identical rows to the same store -- and
with the publish-then-hope baseline the ADR replaced (CAS first, then an in-process bus)."""

from __future__ import annotations

import statistics
import time
from typing import Any

import anyio

from board_outbox.engine.tail.reading import card_ids, decode_event, snapshot
from board_outbox.engine.tail.tail import Tail, TailSettings
from board_outbox.model.clock import SystemClock
from board_outbox.model.codec import from_doc
from board_outbox.model.errors import CardNotFound, MalformedRow
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import SubscriptionIndex
from board_outbox.ports import RowFilter

from .common import Backend, open_backend, settle_heap, synthetic_board


async def _ours(b: Backend, tenants: list[str], batch: int) -> float:
    tail = Tail(events=b.stores.events, cursors=b.stores.cursors, outbox=b.stores.outbox,
                subs=b.stores.subs, cards=b.stores.cards, clock=SystemClock(),
                settings=TailSettings(batch_size=batch, seed="earliest",
                                      batch_seconds=3600))  # the fixed batch is measured
    for t in tenants:  # seeding is a one-time cost, not the steady state
        await tail.cursor(t)
    settle_heap()
    t0 = time.perf_counter()
    await tail.drain_all(tenants)
    return time.perf_counter() - t0


async def _rows(b: Backend) -> list[EffectRow]:
    if b.memory is not None:
        return [from_doc(d, EffectRow, MalformedRow) for d in b.memory.outbox.all_docs()]
    return await b.stores.outbox.find(RowFilter(limit=10**9))


async def _ceiling(name: str, uri: str | None, rows: list[EffectRow], batch: int) -> float:
    """The identical rows, bulk-written in the same chunks to a fresh store of the same kind."""
    async with open_backend(name, uri) as fresh:
        settle_heap()
        t0 = time.perf_counter()
        for i in range(0, len(rows), batch):
            await fresh.stores.outbox.upsert_rows(rows[i : i + batch])
        return time.perf_counter() - t0


async def _baseline(b: Backend, tenants: list[str], batch: int) -> float:
    """Publish-then-hope: CAS the cursor, then normalize/match and hand each match to a bus."""
    send, receive = anyio.create_memory_object_stream[tuple[str, int, str]](max_buffer_size=10**9)
    delivered = 0
    settle_heap()
    t0 = time.perf_counter()
    for t in tenants:
        cursor = await b.stores.cursors.seed(t, 0)
        while True:
            recs = await b.stores.events.read_after(t, cursor, batch)
            if not recs:
                break
            new = recs[-1].seq
            await b.stores.cursors.compare_and_set(t, cursor, new)  # the cursor moves FIRST
            cursor = new
            evs = [decode_event(t, r) for r in recs]
            cards = await b.stores.cards.get_many(t, card_ids(evs))
            index = SubscriptionIndex(await b.stores.subs.list_for_tenant(t))
            for ev in evs:
                try:
                    snap = snapshot(ev, cards)
                except CardNotFound:
                    continue
                for sub in index.matching(snap):
                    send.send_nowait((t, snap.seq, sub.sub_id))  # at-most-once
                    delivered += 1
    elapsed = time.perf_counter() - t0
    send.close()
    receive.close()
    assert delivered > 0
    return elapsed


async def _measure(name: str, uri: str | None, n_tenants: int, n_subs: int, batch: int,
                   events: int) -> tuple[float, float, float, int]:
    async with open_backend(name, uri) as b:
        names = await synthetic_board(b, tenants=n_tenants, subs_per_tenant=n_subs, events=events)
        ours = await _ours(b, names, batch)
        rows = await _rows(b)
    ceiling = await _ceiling(name, uri, rows, batch)
    async with open_backend(name, uri) as b2:
        names = await synthetic_board(b2, tenants=n_tenants, subs_per_tenant=n_subs, events=events)
        base = await _baseline(b2, names, batch)
    return ours, ceiling, base, len(rows)


async def run(
    backends: list[str], uri: str | None, events: int, batches: list[int], subs: list[int],
    tenants: list[int], log: Any = print, repeats: int = 3,
) -> list[dict[str, Any]]:
    """Each configuration runs ``repeats`` times; the median of each measurement is reported."""
    results = []
    for name in backends:
        for n_tenants in tenants:
            for n_subs in subs:
                for batch in batches:
                    runs = [await _measure(name, uri, n_tenants, n_subs, batch, events)
                            for _ in range(repeats)]
                    ours = statistics.median(r[0] for r in runs)
                    ceiling = statistics.median(r[1] for r in runs)
                    base = statistics.median(r[2] for r in runs)
                    r = {
                        "backend": name, "tenants": n_tenants, "subs_per_tenant": n_subs,
                        "batch_size": batch, "events": events, "rows": runs[0][3],
                        "repeats": repeats,
                        "ours_events_per_s": events / ours,
                        "ceiling_events_per_s": events / ceiling,
                        "baseline_events_per_s": events / base,
                        "ratio_ours_to_ceiling": ceiling / ours,
                        "ratio_ours_to_baseline": base / ours,
                    }
                    results.append(r)
                    log(f"materialize {name:6} tenants={n_tenants:<3} subs={n_subs:<3} batch={batch:<5} "
                        f"ours {r['ours_events_per_s']:9,.0f} ev/s | "
                        f"ceiling {r['ceiling_events_per_s']:9,.0f}"
                        f" | ratio {r['ratio_ours_to_ceiling']:.2f} | publish-then-hope "
                        f"{r['baseline_events_per_s']:9,.0f} ev/s")
    return results
