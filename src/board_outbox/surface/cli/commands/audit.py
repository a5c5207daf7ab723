"""``board-outbox audit --tenant T [--since SEQ] [--repair] [--json]`` (A1): rows missing for
events the cursor passed, and orphaned rows. Exit 1 when rows are missing (and not repaired)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

import msgspec

from board_outbox.surface.cli.commands import StoresFactory
from board_outbox.surface.cli.output import UsageError

if TYPE_CHECKING:
    from board_outbox.engine.upkeep.audit import AuditReport


class Progress:
    """How far the audit has got, on stderr (stdout is the report): the first chunk, then at
    most one line every ``every`` seconds, and the last one."""

    def __init__(self, every: float = 2.0) -> None:
        self.every = every
        self.last = -float("inf")

    def __call__(self, rep: AuditReport) -> None:
        now = time.monotonic()
        if now - self.last < self.every and rep.upto < rep.cursor:
            return
        self.last = now
        print(f"audit {rep.tenant_id}: seq {rep.upto} of {rep.cursor}: {rep.events} events, "
              f"{len(rep.missing)} missing, {rep.repaired} repaired", file=sys.stderr, flush=True)


async def cmd_audit(args: argparse.Namespace, factory: StoresFactory) -> int:
    from board_outbox.engine.upkeep.audit import Auditor
    from board_outbox.model.clock import SystemClock
    from board_outbox.service.config import load_config
    from board_outbox.service.health import all_tenants
    from board_outbox.service.runtime import build_registry
    from board_outbox.surface.admin import tail_for

    cfg = load_config(args.config)
    async with factory(cfg) as stores:
        if args.tenant not in await all_tenants(stores):
            raise UsageError(f"audit: unknown tenant {args.tenant!r} (`board-outbox status` "
                             "lists the tenants)")
        registry = build_registry(stores, cfg.projections, cfg.handlers)
        tail = tail_for(stores, registry, cfg.tail, SystemClock())
        auditor = Auditor(tail, retention_seconds=cfg.retention.horizon(),
                          batch_size=args.batch_size, progress=Progress())
        rep = await auditor.audit(args.tenant, after=args.since - 1, repair=args.repair)
    unrepaired = 0 if args.repair else len(rep.missing)
    if args.json:
        print(msgspec.json.encode(rep).decode())
        return 1 if unrepaired else 0
    print(f"audit {rep.tenant_id}: seqs {rep.after + 1}..{rep.upto} (cursor {rep.cursor}): "
          f"{rep.events} events, {rep.rows_checked} rows checked")
    for title, found in (("missing", rep.missing), ("orphaned", rep.orphaned)):
        print(f"{title}: {len(found)} rows")
        for f in found[: args.limit]:
            print(f"  seq {f.seq:>8}  {f.kind:10}  {f.row_key}  ({f.reason})")
        if len(found) > args.limit:
            print(f"  ... {len(found) - args.limit} more (--limit, or --json for all)")
    print(f"presumably expired (event older than the shortest retention, "
          f"{cfg.retention.horizon():g} s): "
          f"{rep.presumed_expired}; events owing no rows (card gone or unreadable): "
          f"{rep.unreadable_events}")
    if args.repair:
        print(f"repaired: {rep.repaired} rows re-materialized "
              f"({len(rep.missing) - rep.repaired} were written meanwhile by the tail)")
    elif rep.missing:
        print("run again with --repair to re-materialize the missing rows")
    return 1 if unrepaired else 0
