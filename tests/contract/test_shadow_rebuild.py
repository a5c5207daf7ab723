"""Zero-downtime rebuild (B3, issue 12 item 7) on every backend: the generation pointer's
compare-and-set, readers that keep the live model until one atomic swap, the running service's
projection rows writing both generations, resume and drop of an interrupted shadow rebuild, a
young gap waited out rather than swapped over, and no row or launch from a rebuild."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from board_outbox.engine.handlers.registry import HandlerRegistry
from board_outbox.engine.upkeep.generations import VersionedReadModels, physical
from board_outbox.model.errors import RebuildConflict
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import ReadModelStore, ReadModelVersions, UpsertIfNewer
from board_outbox.service.runtime import build_registry
from board_outbox.surface.shadow import drop_shadow, shadow_rebuild
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

T = "t1"
P = "board-reflect"
TTL = 5.0


def versioned_models(kit: Kit) -> VersionedReadModels:
    assert kit.rm_versions is not None
    return VersionedReadModels(kit.readmodels, kit.rm_versions, kit.clock, TTL)


def registry_for(kit: Kit) -> Callable[[ReadModelStore], HandlerRegistry]:
    def build(view: ReadModelStore) -> HandlerRegistry:
        return build_registry(dataclasses.replace(kit.stores, readmodels=view), [P])

    return build


def clock_sleep(kit: Kit, hooks: list[Callable[[], Awaitable[None]]] | None = None
                ) -> Callable[[float], Awaitable[None]]:
    """The rebuild's sleep: advances the manual clock; runs the next hook, if any, first."""

    async def sleep(seconds: float) -> None:
        if hooks:
            await hooks.pop(0)()
        kit.clock.advance(seconds)
        await anyio.lowlevel.checkpoint()

    return sleep


async def keys(rm: ReadModelStore, model: str = P) -> list[str]:
    return [d["key"] for d in await rm.list(model, T)]


async def board(kit: Kit, n: int) -> None:
    for i in range(1, n + 1):
        await kit.card(T, f"c{i}", column="inbox")
        await kit.emit(T, "card.created", f"c{i}")
    kit.clock.advance(60)  # every gap old: nothing young to wait out


async def rebuild(kit: Kit, rm: VersionedReadModels, **kw: Any) -> Any:
    args: dict[str, Any] = dict(
        name=P, tenant_id=T, readmodels=rm, registry_for=registry_for(kit), events=kit.events,
        cards=kit.cards, clock=kit.clock, sleep=clock_sleep(kit), young_gap_seconds=30,
        gap_wait_seconds=10)
    args.update(kw)
    return await shadow_rebuild(**args)


async def test_the_generation_pointer_is_a_compare_and_set(kit: Kit) -> None:
    v = kit.rm_versions
    assert v is not None
    default = ReadModelVersions()
    assert await v.get(P, T) == default
    building = ReadModelVersions(active=0, building=1, progress=0)
    assert await v.compare_and_set(P, T, default, building)
    assert not await v.compare_and_set(P, T, default, ReadModelVersions(building=7))  # stale
    assert await v.get(P, T) == building
    moved = ReadModelVersions(active=0, building=1, progress=40)
    assert await v.compare_and_set(P, T, building, moved)
    assert not await v.compare_and_set(P, T, building, default)
    assert await v.get(P, T) == moved and await v.get(P, "other") == default


async def test_writes_go_to_both_generations_while_building_reads_to_the_live_one(kit: Kit) -> None:
    """What keeps a shadow current: an event whose row runs after the replay's last read but
    before the swap exists only in these writes."""
    rm = versioned_models(kit)
    await rm.write_many(P, T, [UpsertIfNewer(key="a", seq=1, doc={"card_id": "a"})])
    assert kit.rm_versions is not None
    assert await kit.rm_versions.compare_and_set(P, T, ReadModelVersions(),
                                                 ReadModelVersions(building=1))
    assert await keys(kit.readmodels, physical(P, 1)) == []
    # within the cache TTL a writer may still write the live generation only ...
    await rm.upsert_if_newer(P, T, "b", 2, {"card_id": "b"})
    assert await keys(kit.readmodels, physical(P, 1)) == []
    kit.clock.advance(TTL)  # ... after it, every write goes to both
    assert await rm.upsert_if_newer(P, T, "c", 3, {"card_id": "c"})
    assert await rm.write_many(P, T, [UpsertIfNewer(key="d", seq=4, doc={"card_id": "d"}),
                                      UpsertIfNewer(key="a", seq=1, doc={"card_id": "a"})]) == [
        True, False]  # the live generation's outcome: "a" at seq 1 is stale there
    assert await keys(kit.readmodels, physical(P, 1)) == ["a", "c", "d"]
    assert await keys(rm) == ["a", "b", "c", "d"]  # readers: the live generation
    assert (await rm.get(P, T, "b") or {}).get("card_id") == "b"
    assert await rm.get(P, T, "zz") is None


async def test_readers_see_the_live_model_until_one_atomic_swap(kit: Kit) -> None:
    rm = versioned_models(kit)
    await board(kit, 3)
    await kit.sub(Subscription(sub_id="s", tenant_id=T, bot="b"))
    # the live generation (0), as old projection code left it: a stray document included
    live_reg = build_registry(dataclasses.replace(kit.stores, readmodels=rm), [P])
    for seq in (1, 2, 3):
        await live_reg.projection(P).apply(T, await _snap(kit, seq))
    await rm.upsert_if_newer(P, T, "stray", 99, {"card_id": "stray"})
    # rows and launches exist before the rebuild; it must add none
    tail = kit.tail(seed="earliest")
    worker = kit.worker()
    await tail.drain_all()
    await worker.tick_any()
    rows_before = await kit.outbox.count_by_state(T)
    launches_before = len(kit.launcher.launches)
    assert launches_before == 3

    steps: list[tuple[int, int]] = []

    def progress(done: int, head: int) -> None:
        steps.append((done, head))  # batch_size=1: one step per event replayed

    async def while_building() -> None:
        # the rebuild has announced generation 1; a reader still sees generation 0, stray and all
        assert await keys(rm) == ["c1", "c2", "c3", "stray"]
        # the service's projection row for a new event writes both generations
        kit.clock.advance(TTL)  # its cached pointer has aged: it re-reads and sees the shadow
        await kit.card(T, "c4", column="done")
        seq = await kit.emit(T, "card.created", "c4")
        await live_reg.projection(P).apply(T, await _snap(kit, seq))

    async def after_swap() -> None:
        fresh = VersionedReadModels(kit.readmodels, rm.versions, kit.clock, TTL)
        assert await keys(fresh) == ["c1", "c2", "c3", "c4"]  # the new generation, whole
        # a reader with the old pointer still reads the old generation, whole
        assert await keys(kit.readmodels, P) == ["c1", "c2", "c3", "c4", "stray"]

    out = await rebuild(kit, rm, sleep=clock_sleep(kit, [while_building, after_swap]),
                        batch_size=1, progress=progress)
    assert out.swapped and (out.generation, out.previous, out.resumed_from) == (1, 0, 0)
    assert len(steps) >= 3 and out.replay.applied >= 3
    assert await kit.rm_versions.get(P, T) == ReadModelVersions(active=1)  # type: ignore[union-attr]
    rm.forget(P, T)
    model = await rm.list(P, T)
    assert [d["key"] for d in model] == ["c1", "c2", "c3", "c4"]
    assert {d["key"]: d["column"] for d in model}["c4"] == "done"
    assert await keys(kit.readmodels, P) == [] and out.dropped_docs == 5  # generation 0 removed
    assert await keys(kit.readmodels, physical(P, 1)) == ["c1", "c2", "c3", "c4"]
    # a rebuild writes read models only: no row, no launch
    assert await kit.outbox.count_by_state(T) == rows_before
    assert len(kit.launcher.launches) == launches_before


async def test_an_interrupted_shadow_rebuild_resumes_where_it_stopped(kit: Kit) -> None:
    rm = versioned_models(kit)
    await board(kit, 5)

    class Interrupted(Exception):
        pass

    def crash_at_3(done: int, head: int) -> None:
        if done == 3:
            raise Interrupted

    with pytest.raises(Interrupted):
        await rebuild(kit, rm, batch_size=1, progress=crash_at_3)
    v = await kit.rm_versions.get(P, T)  # type: ignore[union-attr]
    assert v == ReadModelVersions(active=0, building=1, progress=3)
    assert await keys(rm) == []  # readers: the live (empty) generation, not the partial one
    out = await rebuild(kit, rm, batch_size=1)
    assert out.swapped and out.resumed_from == 3 and out.replay.applied == 2
    rm.forget(P, T)
    assert await keys(rm) == ["c1", "c2", "c3", "c4", "c5"]


async def test_an_interrupted_shadow_rebuild_can_be_dropped(kit: Kit) -> None:
    rm = versioned_models(kit)
    await board(kit, 3)
    live_reg = build_registry(dataclasses.replace(kit.stores, readmodels=rm), [P])
    await live_reg.projection(P).apply(T, await _snap(kit, 1))

    def crash(done: int, head: int) -> None:
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        await rebuild(kit, rm, batch_size=1, progress=crash)
    assert await keys(kit.readmodels, physical(P, 1)) == ["c1"]
    dropped = await drop_shadow(name=P, tenant_id=T, readmodels=rm, sleep=clock_sleep(kit))
    assert dropped == 1 and await keys(kit.readmodels, physical(P, 1)) == []
    assert await kit.rm_versions.get(P, T) == ReadModelVersions()  # type: ignore[union-attr]
    assert await keys(rm) == ["c1"]  # the live model untouched
    assert await drop_shadow(name=P, tenant_id=T, readmodels=rm, sleep=clock_sleep(kit)) is None


async def test_a_young_gap_is_waited_out_not_swapped_over(kit: Kit) -> None:
    rm = versioned_models(kit)
    await board(kit, 2)
    await kit.events.allocate_seq(T)  # seq 3: allocated, its insert maybe still in flight
    await kit.card(T, "c4")
    await kit.emit(T, "card.created", "c4")  # seq 4, just now: the gap at 3 is young
    out = await rebuild(kit, rm, gap_wait_seconds=10)  # waits 10 s of its clock, then gives up
    assert not out.swapped and out.replay.stopped_at_gap == 3 and out.replay.cursor == 2
    assert await kit.rm_versions.get(P, T) == ReadModelVersions(building=1, progress=2)  # type: ignore[union-attr]
    kit.clock.advance(31)  # the gap is a dead allocation now
    out = await rebuild(kit, rm)
    assert out.swapped and out.resumed_from == 2 and out.replay.stepped_gaps == 1
    rm.forget(P, T)
    assert await keys(rm) == ["c1", "c2", "c4"]


async def test_a_pointer_changed_under_the_rebuild_is_a_conflict(kit: Kit) -> None:
    rm = versioned_models(kit)
    await board(kit, 2)

    async def someone_drops_it() -> None:
        await drop_shadow(name=P, tenant_id=T, readmodels=rm, sleep=clock_sleep(kit))

    with pytest.raises(RebuildConflict):
        await rebuild(kit, rm, sleep=clock_sleep(kit, [someone_drops_it]))
    assert await kit.rm_versions.get(P, T) == ReadModelVersions()  # type: ignore[union-attr]


async def _snap(kit: Kit, seq: int) -> Any:
    from board_outbox.engine.tail.reading import decode_event, snapshot

    ev = decode_event(T, (await kit.events.read_after(T, seq - 1, 1))[0])
    card = await kit.cards.get(T, ev.card_id)
    return snapshot(ev, {ev.card_id: card})


async def test_an_unknown_projection_announces_nothing(kit: Kit) -> None:
    from board_outbox.model.errors import UnknownEffectKind

    rm = versioned_models(kit)
    await board(kit, 1)
    with pytest.raises(UnknownEffectKind):
        await rebuild(kit, rm, name="nope")
    assert await kit.rm_versions.get("nope", T) == ReadModelVersions()  # type: ignore[union-attr]


# --- issue 32: --swap-if-unchanged sees added and removed documents; forget() really forgets ----


async def _live_model(kit: Kit, rm: VersionedReadModels, seqs: tuple[int, ...]) -> None:
    """The live generation as the projection wrote it for ``seqs`` (the board has c1..c3)."""
    live_reg = build_registry(dataclasses.replace(kit.stores, readmodels=rm), [P])
    for seq in seqs:
        await live_reg.projection(P).apply(T, await _snap(kit, seq))


@pytest.mark.parametrize(("live_seqs", "extra", "change"), [
    ((1, 2, 3), None, None),  # identical: swapped
    ((1, 2), None, "added"),  # the shadow has c3, the live model not
    ((1, 2, 3), "stray", "removed"),  # the live model has a document the shadow does not
    ((1, 2, 3), "c2", "changed"),  # same key, other content
])
async def test_swap_if_unchanged_swaps_only_an_identical_shadow(
        kit: Kit, live_seqs: tuple[int, ...], extra: str | None, change: str | None) -> None:
    rm = versioned_models(kit)
    await board(kit, 3)
    await _live_model(kit, rm, live_seqs)
    if extra is not None:
        await rm.upsert_if_newer(P, T, extra, 99, {"key": extra, "card_id": extra,
                                                   "title": "hand-written"})
    out = await rebuild(kit, rm, swap="if-unchanged")
    assert out.diff is not None
    counts = {"added": out.diff.added, "removed": out.diff.removed, "changed": out.diff.changed}
    assert counts == {k: int(k == change) for k in counts}
    assert out.swapped == (change is None)
    assert kit.rm_versions is not None
    v = await kit.rm_versions.get(P, T)
    if change is None:
        assert (v.active, v.building) == (1, None)
    else:  # not swapped: the live model untouched, the shadow left building for a later run
        assert (v.active, v.building) == (0, 1)
        assert [e.change for e in out.diff.examples] == [change]


async def test_forget_drops_the_cached_pointers_at_once(kit: Kit) -> None:
    """After a swap or a drop the process that made it reads the new pointer at once, not after
    the cache TTL (here an hour; the clock does not move)."""
    assert kit.rm_versions is not None
    rm = VersionedReadModels(kit.readmodels, kit.rm_versions, kit.clock, 3600.0)
    await rm.pinned(P, 0).upsert_if_newer(P, T, "old", 1, {"key": "old"})
    await rm.pinned(P, 1).upsert_if_newer(P, T, "new", 1, {"key": "new"})
    assert await keys(rm) == ["old"]  # the pointers are cached now (default: generation 0)
    assert await kit.rm_versions.compare_and_set(P, T, ReadModelVersions(),
                                                 ReadModelVersions(active=1))
    assert await keys(rm) == ["old"]  # within the TTL: the cached pointer
    rm.forget(P, T)
    assert await keys(rm) == ["new"]
    assert (await rm.pointer(P, T)).active == 1


async def test_after_a_swap_the_rebuilding_process_reads_the_new_generation_at_once(kit: Kit) -> None:
    rm = VersionedReadModels(kit.readmodels, kit.rm_versions, kit.clock, 3600.0)  # type: ignore[arg-type]
    await board(kit, 2)
    await rm.upsert_if_newer(P, T, "stray", 1, {"key": "stray"})

    async def no_wait(_seconds: float) -> None:  # the TTL waits pass, the clock stands still
        await anyio.lowlevel.checkpoint()

    out = await rebuild(kit, rm, sleep=no_wait)
    assert out.swapped and out.generation == 1
    assert sorted(await keys(rm)) == ["c1", "c2"]  # the new generation, not the cached 0
