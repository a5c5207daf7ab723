"""``board-outbox ensure-schema``: create the MongoDB indexes."""

from __future__ import annotations

import argparse

from board_outbox.model.errors import ConfigError
from board_outbox.surface.cli.commands import StoresFactory


async def cmd_ensure_schema(args: argparse.Namespace, factory: StoresFactory) -> int:
    from board_outbox.service.config import load_config

    cfg = load_config(args.config)
    if cfg.store.backend != "mongo":
        raise ConfigError("store.backend: ensure-schema needs the mongo backend (it is 'memory')")
    from board_outbox.adapters.mongo import ensure_schema
    from board_outbox.service.backends import mongo_client

    client = mongo_client(cfg.store)
    try:
        names = await ensure_schema(client[cfg.store.database])
    finally:
        await client.close()
    print(f"schema ensured on {cfg.store.database!r}: {', '.join(names)}")
    return 0
