"""``board-outbox ensure-schema``: create the MongoDB indexes, make the settled rows' TTL
indexes follow ``[retention]`` (O8), and write the store's epoch unless it exists (the deployment
begins following the board here: a ``latest`` seed reads every tenant born after it in full)."""

from __future__ import annotations

import argparse
import time

from board_outbox.surface.cli.commands import StoresFactory


async def cmd_ensure_schema(args: argparse.Namespace, factory: StoresFactory) -> int:
    from board_outbox.adapters.mongo import ensure_schema
    from board_outbox.adapters.mongo.cursors import MongoCursorStore
    from board_outbox.service.backends import mongo_database
    from board_outbox.service.config import load_config

    cfg = load_config(args.config)
    async with mongo_database(cfg, command="ensure-schema") as db:
        names = await ensure_schema(db, cfg.retention)
        await MongoCursorStore(db).epoch(time.time())
    if args.json:
        from board_outbox.surface.cli.output import print_json

        print_json({"schema": 1, "database": cfg.store.database, "changed": names})
    else:
        print(f"schema ensured on {cfg.store.database!r}: "
              f"{', '.join(names) if names else 'every index in place, nothing changed'}")
    return 0
