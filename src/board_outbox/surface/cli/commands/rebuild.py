"""``board-outbox rebuild PROJECTION --tenant T [--shadow | --drop-shadow]`` (B3)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from board_outbox.model.errors import ConfigError
from board_outbox.surface.cli.commands import StoresFactory
from board_outbox.surface.cli.output import UsageError, print_json

if TYPE_CHECKING:
    from board_outbox.engine.handlers.registry import HandlerRegistry
    from board_outbox.engine.telemetry.metrics import Metrics
    from board_outbox.ports import ReadModelStore, Stores
    from board_outbox.service.config_sections import Config


async def cmd_rebuild(args: argparse.Namespace, factory: StoresFactory) -> int:
    from board_outbox.service.config import load_config
    from board_outbox.service.telemetry import setup_telemetry

    cfg = load_config(args.config)
    tel = setup_telemetry(replica=cfg.service.replica_name)  # rebuild progress gauges (P2)
    try:
        return await _rebuild(args, factory, cfg)
    finally:
        tel.shutdown()


@contextmanager
def _progress_bar(label: str, projection: str, tenant: str) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr; yields the ``progress(done, head)`` callback."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn(label + " {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), transient=False, console=Console(stderr=True)) as bar:
        task = bar.add_task(f"{projection} / {tenant}", total=None)

        def progress(done: int, head: int) -> None:
            bar.update(task, completed=done, total=max(head, done))

        yield progress


async def _rebuild(args: argparse.Namespace, factory: StoresFactory, cfg: Config) -> int:
    from board_outbox.engine.telemetry.metrics import Metrics
    from board_outbox.model.clock import SystemClock
    from board_outbox.service.plugins import resolve_projection
    from board_outbox.service.runtime import build_registry
    from board_outbox.surface.admin import rebuild_projection

    metrics = Metrics()
    async with factory(cfg) as stores:
        registry = build_registry(stores, cfg.projections, cfg.handlers)
        if args.projection in cfg.projections and args.projection not in registry.projections:
            # named as configured ("module:Class" or an entry point): rebuild by its name
            args.projection = str(resolve_projection(args.projection, "rebuild").name)  # type: ignore[attr-defined]
        if args.projection not in registry.projections:
            raise ConfigError(f"projections: {args.projection!r} is not enabled "
                              f"(enabled: {', '.join(registry.projections) or 'none'})")
        if (args.swap or args.swap_if_unchanged) and not args.shadow:
            raise UsageError("rebuild: --swap and --swap-if-unchanged only go with --shadow")
        if args.shadow or args.drop_shadow:
            return await _shadow(args, stores, cfg, metrics)
        with _progress_bar("rebuild", args.projection, args.tenant) as progress:
            res = await rebuild_projection(
                name=args.projection, tenant_id=args.tenant, registry=registry,
                events=stores.events, cards=stores.cards, clock=SystemClock(),
                young_gap_seconds=cfg.tail.young_gap_seconds, batch_size=args.batch_size,
                progress=progress, metrics=metrics,
            )
    if args.json:
        print_json(res)
        return 0
    print(f"rebuilt {res.projection} for {res.tenant_id}: {res.applied} events applied up to seq "
          f"{res.cursor} of {res.head}; {res.skipped_deleted} of deleted cards skipped, "
          f"{res.skipped_malformed} malformed skipped, {res.stepped_gaps} dead allocations stepped over")
    if res.stopped_at_gap is not None:
        print(f"stopped at young gap: seq {res.stopped_at_gap} may still be inserting; "
              "the running service's projection rows continue from there (or rebuild again later)")
    return 0


async def _shadow(args: argparse.Namespace, stores: Stores, cfg: Config, metrics: Metrics) -> int:
    import dataclasses

    import anyio

    from board_outbox.engine.upkeep.generations import VersionedReadModels, versioned
    from board_outbox.model.clock import SystemClock
    from board_outbox.service.runtime import build_registry
    from board_outbox.surface.shadow import drop_shadow, shadow_rebuild

    rm = versioned(stores, SystemClock(), cfg.store.generation_cache_seconds).readmodels
    if not isinstance(rm, VersionedReadModels):
        raise ConfigError(f"store.backend: {cfg.store.backend!r} keeps no read-model generations "
                          "(--shadow needs them)")
    name, tenant = args.projection, args.tenant
    if args.drop_shadow:
        dropped = await drop_shadow(name=name, tenant_id=tenant, readmodels=rm, sleep=anyio.sleep)
        if args.json:
            print_json({"schema": 1, "projection": name, "tenant_id": tenant,
                        "dropped": dropped is not None, "documents_removed": dropped or 0})
        elif dropped is None:
            print(f"no shadow rebuild of {name} for {tenant} to drop")
        else:
            print(f"dropped the shadow rebuild of {name} for {tenant}: {dropped} documents removed; "
                  "the live model is untouched")
        return 0

    def registry_for(view: ReadModelStore) -> HandlerRegistry:
        return build_registry(dataclasses.replace(stores, readmodels=view), cfg.projections,
                              cfg.handlers)

    gap_wait = args.gap_wait if args.gap_wait is not None else 2 * cfg.tail.young_gap_seconds
    with _progress_bar("shadow rebuild", name, tenant) as progress:
        out = await shadow_rebuild(
            name=name, tenant_id=tenant, readmodels=rm, registry_for=registry_for,
            events=stores.events, cards=stores.cards, clock=SystemClock(), sleep=anyio.sleep,
            young_gap_seconds=cfg.tail.young_gap_seconds, gap_wait_seconds=gap_wait,
            batch_size=args.batch_size, progress=progress, metrics=metrics,
            swap="swap" if args.swap else "if-unchanged" if args.swap_if_unchanged else "no",
            diff_examples=args.diff_examples,
        )
    res = out.replay
    code = 0 if out.swapped else (1 if args.swap_if_unchanged else 0) if out.diff is not None \
        else 3
    if args.json:
        print_json(out)
        return code
    began = f"resumed at seq {out.resumed_from}" if out.resumed_from else "from seq 0"
    print(f"shadow rebuild of {name} for {tenant}, generation {out.generation} ({began}): "
          f"{res.applied} events applied up to seq {res.cursor}; {res.skipped_deleted} of deleted "
          f"cards skipped, {res.skipped_malformed} malformed skipped, {res.stepped_gaps} dead "
          "allocations stepped over")
    if out.diff is not None:
        d = out.diff
        print(f"diff, generation {d.shadow} against the live generation {d.live}: "
              f"{d.added} added, {d.removed} removed, {d.changed} changed, {d.unchanged} unchanged "
              f"({d.shadow_docs} documents against {d.live_docs})")
        for ex in d.examples:
            fields = f" ({', '.join(ex.fields)})" if ex.fields else ""
            print(f"  {ex.change:8} {ex.key}{fields}")
    if out.swapped:
        print(f"swapped: readers now see generation {out.generation}; generation {out.previous} "
              f"removed ({out.dropped_docs} documents)")
        return 0
    if out.diff is not None:
        if args.swap_if_unchanged:
            print("not swapped: the new generation differs from the live one (--swap-if-unchanged);"
                  " the shadow stays current: run with --swap to swap it in, or --drop-shadow")
            return 1
        print("not swapped (no --swap): the live model is untouched and the shadow stays current;"
              " run the same command with --swap to swap it in, or --drop-shadow to discard it")
        return 0
    print(f"not swapped: seq {res.stopped_at_gap} is still a young gap after {gap_wait:g} s; the "
          "live model is untouched and the shadow keeps up with new events. Run the same "
          "command again to resume, or --drop-shadow to discard it.")
    return 3
