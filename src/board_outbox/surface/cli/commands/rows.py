"""``board-outbox rows cancel|rerun|find`` (A8): the bulk cancel and rerun by filter, as a plan
(``commands/bulkreplay.run_bulk``: the dead-letters replay's steps), and the row search. Every
argument is checked before the configuration and the store are opened."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import msgspec

from board_outbox.model.dead_letters import ACTION_STATES, BulkFilter
from board_outbox.model.search import RowQuery
from board_outbox.surface.cli.commands import StoresFactory
from board_outbox.surface.cli.output import UsageError, print_unreadable
from board_outbox.surface.format import when


async def cmd_rows(args: argparse.Namespace, factory: StoresFactory) -> int:
    from board_outbox.service.config import load_config

    if args.rows_command == "find":
        query = find_query(args)
        cfg = load_config(args.config)
        async with factory(cfg) as stores:
            return await _find(stores, query, as_json=args.json)
    flt = action_filter(args)
    cfg = load_config(args.config)
    async with factory(cfg) as stores:
        from board_outbox.surface.cli.commands.bulkreplay import run_bulk

        return await run_bulk(args, stores, flt, args.rows_command, f"rows {args.rows_command}")


def action_filter(args: argparse.Namespace) -> BulkFilter:
    """The cancel's or the rerun's filter, or a ``UsageError``."""
    from board_outbox.surface.bulk_filter import parse_filter, split_term

    if args.rows_command == "cancel":
        reason = args.reason.strip()
        if not reason or len(reason) > 500 or not reason.isprintable():
            raise UsageError("rows cancel: --reason: 1 to 500 printable characters")
        args.reason = reason
    flt = parse_filter([split_term(t) for t in args.terms], now=time.time())
    return msgspec.structs.replace(
        flt, state=ACTION_STATES[args.rows_command],
        include_one_shot=bool(getattr(args, "include_one_shot", False)),
        include_rerun=bool(getattr(args, "include_rerun", False)),
        include_expired=bool(getattr(args, "include_expired", False)))


def find_query(args: argparse.Namespace) -> RowQuery:
    from board_outbox.surface.row_search import parse_query

    return parse_query(card=args.card, event=args.event, seq_range=args.seq_range,
                       row_key=args.row_key, state=args.state, tenant=args.tenant,
                       limit=args.limit)


async def _find(stores: Any, query: RowQuery, *, as_json: bool) -> int:
    from board_outbox.model.codec import unreadable

    with unreadable() as bad:
        rows = await stores.outbox.search(query)
    if as_json:
        for r in rows:
            print(msgspec.json.encode(r).decode())
        print_unreadable(bad, file=sys.stderr)  # stdout stays one document a line
        return 0
    if not rows:
        print(f"no rows: {query.describe()}")
    else:
        print(f"{'SEQ':>8} {'STATE':10} {'KIND':10} {'UPDATED (UTC)':20} ROW_KEY")
        for r in rows:
            print(f"{r.seq:>8} {r.state:10} {r.kind[:10]:10} "
                  f"{when(r.updated_at, fmt='%Y-%m-%d %H:%M:%S'):20} {r.row_key}")
        print(f"{len(rows)} row{'s' if len(rows) != 1 else ''}: {query.describe()}"
              + (" (the limit: more may match)" if len(rows) >= query.limit else ""))
    print_unreadable(bad)
    return 0
