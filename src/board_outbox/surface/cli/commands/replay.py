"""``board-outbox replay --tenant T --since SEQ [--subscription S] [--dry-run] [--json]`` (A4):
the rows the tail would write for a range under the current rules, and (without --dry-run) the
ones not stored yet, written the tail's way."""

from __future__ import annotations

import argparse

import msgspec

from board_outbox.surface.cli.commands import StoresFactory
from board_outbox.surface.cli.output import UsageError


async def cmd_replay(args: argparse.Namespace, factory: StoresFactory) -> int:
    from board_outbox.engine.upkeep.replay import replay_range
    from board_outbox.model.clock import SystemClock
    from board_outbox.service.config import load_config
    from board_outbox.service.health import all_tenants
    from board_outbox.service.runtime import build_registry
    from board_outbox.surface.admin import tail_for

    cfg = load_config(args.config)
    async with factory(cfg) as stores:
        if args.tenant not in await all_tenants(stores):
            raise UsageError(f"replay: unknown tenant {args.tenant!r} (`board-outbox status` "
                             "lists the tenants)")
        if args.subscription is not None and args.subscription not in {
                s.sub_id for s in await stores.subs.list_for_tenant(args.tenant)}:
            raise UsageError(f"replay: tenant {args.tenant!r} has no subscription "
                             f"{args.subscription!r}")
        registry = build_registry(stores, cfg.projections, cfg.handlers)
        tail = tail_for(stores, registry, cfg.tail, SystemClock())
        plan = await replay_range(tail, args.tenant, since=args.since,
                                  subscription=args.subscription, dry_run=args.dry_run,
                                  batch_size=args.batch_size,
                                  retention_seconds=cfg.retention.horizon())
    if args.json:
        print(msgspec.json.encode(plan).decode())
        return 0
    verb = "would write" if plan.dry_run else "wrote"
    shown = [r for r in plan.rows if args.all_rows or r.action == "fire"]
    for r in shown[: args.limit]:
        print(f"seq {r.seq:>8}  {r.action:13}  {r.row_key}  -> {r.target}")
    if len(shown) > args.limit:
        print(f"... {len(shown) - args.limit} more (--limit, or --json for all)")
    counts = ", ".join(f"{a} {plan.count(a)}" for a in
                       ("fire", "queued", "done", "dead-letter", "maybe-expired"))
    print(f"replay {plan.tenant_id} seqs {plan.since}..{plan.upto}"
          f"{' (dry run)' if plan.dry_run else ''}: {plan.events} events, {len(plan.rows)} rows "
          f"under the current rules ({counts}); {verb} "
          f"{plan.count('fire') if plan.dry_run else plan.written} rows")
    return 0
