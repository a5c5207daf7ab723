"""``board-outbox dead-letters list|show|replay|purge`` (B1)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from board_outbox.surface.cli.commands import StoresFactory
from board_outbox.surface.cli.output import (
    UsageError,
    confirm_purge,
    print_dead_letters,
    print_json,
    print_row,
    print_unreadable,
)


async def cmd_dead_letters(args: argparse.Namespace, factory: StoresFactory) -> int:
    import getpass

    from board_outbox.model.clock import SystemClock
    from board_outbox.model.codec import unreadable
    from board_outbox.service.config import load_config
    from board_outbox.surface.admin import dead_letter_filter, replay_rows, row_json

    bulk = None
    if args.dl_command == "replay":  # the filter's errors before the store is opened
        from board_outbox.surface.cli.commands.bulkreplay import bulk_filter

        bulk = bulk_filter(args)
    cfg = load_config(args.config)
    async with factory(cfg) as stores:
        outbox = stores.outbox
        if args.dl_command == "show":
            row = await outbox.get(args.row_key)
            if row is None:
                print(f"board-outbox: no row {args.row_key!r}", file=sys.stderr)
                return 1
            if args.json:
                print(row_json(row).decode())
            else:
                print_row(row)
            return 0
        if bulk is not None:
            from board_outbox.surface.cli.commands.bulkreplay import bulk_replay

            return await bulk_replay(args, stores, bulk)
        flt = dead_letter_filter(args.tenant, args.since, args.until, args.limit or 100)
        if args.dl_command == "list":
            with unreadable() as bad:  # R1, R7: each costs only itself, and is named
                rows = await outbox.find(flt)
            if args.json:
                for r in rows:
                    print(msgspec.json.encode(r).decode())
                print_unreadable(bad, file=sys.stderr)  # stdout stays one document a line
            else:
                print_dead_letters(rows)
                print_unreadable(bad)
            return 0
        if args.dl_command == "replay":
            if bool(args.row_keys) == bool(args.all):
                raise UsageError("dead-letters replay: give ROW_KEY(s), --all or --filter, one of them")
            keys = args.row_keys or [r.row_key for r in await outbox.find(flt)]
            if args.dry_run:
                return await _preview(stores, cfg, keys)
            by = args.by or getpass.getuser()
            done = await replay_rows(outbox, keys, SystemClock(), by)
            if args.json:
                print_json({"schema": 1, "replayed": done,
                            "left_alone": [k for k in keys if k not in done]})
            else:
                for key in keys:
                    print(("replayed " if key in done else "not a dead-letter, left alone: ") + key)
                print(f"{len(done)} of {len(keys)} rows returned to pending")
            return 0 if len(done) == len(keys) or args.all else 1
        # purge
        victims = await outbox.find(flt)
        n = 0
        if victims:
            if not args.yes and not confirm_purge(len(victims)):
                print("nothing deleted")
                return 1
            n = await outbox.purge(flt)
        if args.json:
            print_json({"schema": 1, "purged": n})
        else:
            print(f"purged {n} dead-letters" if victims else "no dead-letters match")
        return 0


async def _preview(stores: Any, cfg: Any, keys: list[str]) -> int:
    """``replay --dry-run`` (A4): what each replay would do under the current rules; no write."""
    from board_outbox.model.errors import MalformedDocument
    from board_outbox.service.runtime import build_registry
    from board_outbox.surface.admin import preview_dead_letter

    registry = build_registry(stores, cfg.projections, cfg.handlers)
    would = 0
    for key in keys:
        try:
            row = await stores.outbox.get(key)
        except MalformedDocument as exc:  # costs only itself (R1, R7)
            print(f"{key}: does not decode, left alone ({exc.detail})")
            continue
        if row is None:
            print(f"{key}: no such row")
            continue
        what = await preview_dead_letter(row, stores.subs, registry)
        would += row.state == "failed"
        print(f"{key}: {what}")
    print(f"dry run: {would} of {len(keys)} rows would return to pending; nothing changed")
    return 0
