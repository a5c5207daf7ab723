"""``board-outbox rebuild PROJECTION --tenant T`` (B3)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ...errors import ConfigError
from . import StoresFactory

if TYPE_CHECKING:
    from ...config import Config


async def cmd_rebuild(args: argparse.Namespace, factory: StoresFactory) -> int:
    from ...config import load_config
    from ...telemetry.sdk import setup_telemetry

    cfg = load_config(args.config)
    tel = setup_telemetry(replica=cfg.service.replica_name)  # rebuild progress gauges (P2)
    try:
        return await _rebuild(args, factory, cfg)
    finally:
        tel.shutdown()


async def _rebuild(args: argparse.Namespace, factory: StoresFactory, cfg: Config) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from ...admin import rebuild_projection
    from ...clock import SystemClock
    from ...plugins import resolve_projection
    from ...runtime import build_registry
    from ...telemetry.metrics import Metrics

    metrics = Metrics()
    async with factory(cfg) as stores:
        registry = build_registry(stores, cfg.projections, cfg.handlers)
        if args.projection in cfg.projections and args.projection not in registry.projections:
            # named as configured ("module:Class" or an entry point): rebuild by its name
            args.projection = str(resolve_projection(args.projection, "rebuild").name)  # type: ignore[attr-defined]
        if args.projection not in registry.projections:
            raise ConfigError(f"projections: {args.projection!r} is not enabled "
                              f"(enabled: {', '.join(registry.projections) or 'none'})")
        with Progress(TextColumn("rebuild {task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeRemainingColumn(), transient=False,
                      console=Console(stderr=True)) as bar:
            task = bar.add_task(f"{args.projection} / {args.tenant}", total=None)

            def progress(done: int, head: int) -> None:
                bar.update(task, completed=done, total=max(head, done))

            res = await rebuild_projection(
                name=args.projection, tenant_id=args.tenant, registry=registry,
                events=stores.events, cards=stores.cards, clock=SystemClock(),
                young_gap_seconds=cfg.tail.young_gap_seconds, batch_size=args.batch_size,
                progress=progress, metrics=metrics,
            )
    print(f"rebuilt {res.projection} for {res.tenant_id}: {res.applied} events applied up to seq "
          f"{res.cursor} of {res.head}; {res.skipped_deleted} of deleted cards skipped, "
          f"{res.skipped_malformed} malformed skipped, {res.stepped_gaps} dead allocations stepped over")
    if res.stopped_at_gap is not None:
        print(f"stopped at young gap: seq {res.stopped_at_gap} may still be inserting; "
              "the running service's projection rows continue from there (or rebuild again later)")
    return 0
