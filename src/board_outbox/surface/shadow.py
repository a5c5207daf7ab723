"""Zero-downtime rebuilds (B3, A3): build the next generation of a (model, tenant) read model
beside the live one, compare the two (``diff_generations``), and swap the generation pointer in
one compare-and-set (``shadow_rebuild``), or discard an interrupted build (``drop_shadow``). The
replay is ``admin``'s: the tail's reading step, one ``apply_batch`` per batch."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

import msgspec

from board_outbox.engine.handlers.registry import HandlerRegistry
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.engine.upkeep.generations import VersionedReadModels
from board_outbox.model.clock import Clock
from board_outbox.model.errors import ProjectionFailed, RebuildConflict
from board_outbox.ports import CardStore, EventLog, ReadModelStore, ReadModelVersions
from board_outbox.surface.admin import RebuildResult, _replay

__all__ = ["DiffExample", "GenerationDiff", "ShadowResult", "SwapMode", "diff_generations",
           "drop_shadow", "shadow_rebuild"]


class DiffExample(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    change: str  # added | removed | changed
    fields: list[str] = msgspec.field(default_factory=list)  # changed: the fields that differ


class GenerationDiff(msgspec.Struct, kw_only=True):
    """How a shadow generation differs from the live one (A3), document by document (by key;
    ``_id`` and ``model`` are storage, not content)."""

    live: int
    shadow: int
    live_docs: int = 0
    shadow_docs: int = 0
    added: int = 0  # in the shadow only
    removed: int = 0  # in the live generation only
    changed: int = 0
    unchanged: int = 0
    examples: list[DiffExample] = msgspec.field(default_factory=list)

    @property
    def identical(self) -> bool:
        return self.added == self.removed == self.changed == 0


_STORAGE_FIELDS = frozenset({"_id", "model"})


def _content(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in _STORAGE_FIELDS}


async def diff_generations(readmodels: VersionedReadModels, name: str, tenant_id: str, live: int,
                           shadow: int, examples: int = 3) -> GenerationDiff:
    """Compare two generations of one (model, tenant) read model: one ``list`` of each (both are
    held in memory). At most ``examples`` examples of each kind of change, by key order."""
    old = {str(d.get("key")): _content(d)
           for d in await readmodels.pinned(name, live).list(name, tenant_id)}
    new = {str(d.get("key")): _content(d)
           for d in await readmodels.pinned(name, shadow).list(name, tenant_id)}
    out = GenerationDiff(live=live, shadow=shadow, live_docs=len(old), shadow_docs=len(new))
    shown: dict[str, int] = {}

    def example(key: str, change: str, fields: list[str] | None = None) -> None:
        if shown.get(change, 0) < examples:
            shown[change] = shown.get(change, 0) + 1
            out.examples.append(DiffExample(key=key, change=change, fields=fields or []))

    for key in sorted(old.keys() | new.keys()):
        if key not in old:
            out.added += 1
            example(key, "added")
        elif key not in new:
            out.removed += 1
            example(key, "removed")
        elif old[key] != new[key]:
            out.changed += 1
            fields = sorted(f for f in old[key].keys() | new[key].keys()
                            if old[key].get(f) != new[key].get(f))
            example(key, "changed", fields)
        else:
            out.unchanged += 1
    return out


SwapMode = Literal["swap", "no", "if-unchanged"]


class ShadowResult(msgspec.Struct, kw_only=True):
    replay: RebuildResult
    generation: int  # the generation built
    previous: int  # the generation readers saw before
    resumed_from: int  # 0, or the seq an interrupted shadow rebuild had reached
    swapped: bool = False
    dropped_docs: int = 0  # documents of the previous generation removed after the swap
    diff: GenerationDiff | None = None  # the shadow against the live generation, before the swap


async def shadow_rebuild(
    *,
    name: str,
    tenant_id: str,
    readmodels: VersionedReadModels,
    registry_for: Callable[[ReadModelStore], HandlerRegistry],
    events: EventLog,
    cards: CardStore,
    clock: Clock,
    sleep: Callable[[float], Awaitable[None]],
    young_gap_seconds: float,
    gap_wait_seconds: float,
    batch_size: int = 1000,
    progress: Callable[[int, int], None] | None = None,
    metrics: Metrics | None = None,
    swap: SwapMode = "swap",
    diff_examples: int = 3,
) -> ShadowResult:
    """Build the next generation of ``name``'s read model for one tenant beside the live one,
    catch up, then swap the generation pointer in one compare-and-set (B3).

    Readers keep the live generation until the swap and never see a half-built one. While the
    shadow builds, the service's projection rows write both generations (``VersionedReadModels``),
    so it is current when the replay reaches the end of the log. Nothing but read models is
    written: no row, no launch. An interrupted run leaves the pointer naming the building
    generation and the seq reached; running again resumes there, ``drop_shadow`` discards it.
    A young gap is waited out (up to ``gap_wait_seconds``) rather than swapped over: events past
    it whose rows ran before the shadow existed are only in the log.

    Caught up, it compares the shadow with the live generation (``diff_generations``, A3) and
    swaps when ``swap`` is "swap", or "if-unchanged" and nothing differs; otherwise it stops
    before the swap, the shadow left building (kept current by the rows) for a later run.
    """
    res = RebuildResult(tenant_id=tenant_id, projection=name)
    v = await readmodels.pointer(name, tenant_id, fresh=True)
    if v.problem is not None:
        raise RebuildConflict(f"{name}/{tenant_id}: the generation pointer is malformed "
                              f"({v.problem}); fix or delete that read_model_versions document")
    gen = v.active + 1 if v.building is None else v.building
    registry = registry_for(readmodels.pinned(name, gen))
    registry.projection(name)  # UnknownEffectKind for a bad name, before anything is announced
    if v.building is None:
        await readmodels.pinned(name, gen).reset(name, tenant_id)  # leftovers of a dropped one
        started = ReadModelVersions(active=v.active, building=gen, progress=0)
        if not await readmodels.versions.compare_and_set(name, tenant_id, v, started):
            raise RebuildConflict(f"{name}/{tenant_id}: the generation pointer changed under the "
                                  "rebuild (another rebuild?); run it again")
        v, resumed = started, 0
    else:
        resumed = v.progress
    out = ShadowResult(replay=res, generation=gen, previous=v.active, resumed_from=resumed)
    # every writer's cached pointer now names the building generation: rows write both
    await sleep(readmodels.ttl_seconds)
    cur = v

    async def saved(seq: int) -> None:
        nonlocal cur
        nxt = ReadModelVersions(active=cur.active, building=gen, progress=seq)
        if not await readmodels.versions.compare_and_set(name, tenant_id, cur, nxt):
            raise RebuildConflict(f"{name}/{tenant_id}: the shadow generation {gen} was dropped "
                                  "or swapped by someone else during the rebuild")
        cur = nxt

    deadline = clock.now() + gap_wait_seconds
    after = resumed
    while True:
        res.head = await events.max_inserted_seq(tenant_id)
        try:
            await _replay(res, registry=registry, events=events, cards=cards, clock=clock,
                          young_gap_seconds=young_gap_seconds, batch_size=batch_size,
                          after=after, progress=progress, metrics=metrics, saved=saved)
        except ProjectionFailed as exc:
            # a shadow that cannot be finished is not left building (every projection row
            # would keep writing it): dropped, the pointer back to the live generation alone
            dropped = await drop_shadow(name=name, tenant_id=tenant_id, readmodels=readmodels,
                                        sleep=sleep)
            note = (f"; the shadow generation {gen} was dropped, the live model is untouched"
                    if dropped is not None else "")
            raise ProjectionFailed(f"{exc}{note}") from exc
        after = res.cursor
        if res.stopped_at_gap is None:
            break
        if clock.now() >= deadline:
            return out  # left building at res.cursor: run again to resume
        await sleep(min(1.0, max(0.05, deadline - clock.now())))
    out.diff = await diff_generations(readmodels, name, tenant_id, v.active, gen, diff_examples)
    if swap == "no" or (swap == "if-unchanged" and not out.diff.identical):
        return out  # stopped before the swap: run again (with a swap flag) to resume and swap
    swapped = ReadModelVersions(active=gen, building=None, progress=0)
    if not await readmodels.versions.compare_and_set(name, tenant_id, cur, swapped):
        raise RebuildConflict(f"{name}/{tenant_id}: the pointer changed before the swap; the "
                              "live generation is untouched, run the rebuild again")
    readmodels.forget(name, tenant_id)
    out.swapped = True
    # a reader holding the old pointer still reads the old, complete generation until its TTL
    await sleep(readmodels.ttl_seconds)
    out.dropped_docs = await readmodels.pinned(name, v.active).reset(name, tenant_id)
    return out


async def drop_shadow(*, name: str, tenant_id: str, readmodels: VersionedReadModels,
                      sleep: Callable[[float], Awaitable[None]]) -> int | None:
    """Discard an interrupted shadow rebuild: the live generation stays as it is. Returns the
    documents removed, or None when no shadow rebuild is under way."""
    v = await readmodels.pointer(name, tenant_id, fresh=True)
    if v.building is None:
        return None
    if not await readmodels.versions.compare_and_set(
            name, tenant_id, v, ReadModelVersions(active=v.active)):
        raise RebuildConflict(f"{name}/{tenant_id}: the generation pointer changed; run again")
    readmodels.forget(name, tenant_id)
    await sleep(readmodels.ttl_seconds)  # writers stop writing the dropped generation
    return await readmodels.pinned(name, v.building).reset(name, tenant_id)
