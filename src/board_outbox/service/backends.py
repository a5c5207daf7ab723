"""Choosing a backend is a table lookup: a backend's name -> the factory that opens its ports.

Each adapter package exposes one factory taking plain settings (``memory.open_stores``,
``mongo.open_stores``); this module is the only place that reads the configuration for them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from board_outbox.adapters.launchers import HttpLauncher, LogLauncher
from board_outbox.engine.upkeep.generations import versioned
from board_outbox.model.clock import SystemClock
from board_outbox.model.errors import ConfigError
from board_outbox.ports import Launcher, Stores
from board_outbox.service.config import require_backend
from board_outbox.service.config_sections import Config, LauncherConfig, StoreConfig

Opener = Callable[[Config, Launcher, bool], AbstractAsyncContextManager[Stores]]


def _memory(cfg: Config, launcher: Launcher, ensure_schema: bool) -> AbstractAsyncContextManager[Stores]:
    from board_outbox.adapters.memory import open_stores

    return open_stores(launcher=launcher)


def _mongo(cfg: Config, launcher: Launcher, ensure_schema: bool) -> AbstractAsyncContextManager[Stores]:
    from board_outbox.adapters.mongo import open_stores

    s = cfg.store
    return open_stores(
        launcher=launcher, uri=s.uri, database=s.database, app_name=s.app_name,
        op_timeout_seconds=s.op_timeout_seconds, connect_timeout_seconds=s.connect_timeout_seconds,
        server_selection_timeout_seconds=s.server_selection_timeout_seconds,
        read_concern=s.read_concern, write_concern=s.write_concern,
        change_feed=cfg.tail.change_streams, ensure_schema=ensure_schema,
        retention=cfg.retention,
    )


def mongo_client(s: StoreConfig) -> Any:
    """An ``AsyncMongoClient`` for the store settings (``ensure-schema`` needs the bare client)."""
    from board_outbox.adapters.mongo import make_client

    return make_client(
        s.uri, app_name=s.app_name, op_timeout_seconds=s.op_timeout_seconds,
        connect_timeout_seconds=s.connect_timeout_seconds,
        server_selection_timeout_seconds=s.server_selection_timeout_seconds,
        read_concern=s.read_concern, write_concern=s.write_concern,
    )


@asynccontextmanager
async def mongo_database(cfg: Config, *, command: str) -> AsyncIterator[Any]:
    """The configured MongoDB database, reached (one ``ping`` within the server selection
    timeout, else one line naming the host and the cause), for the commands that need the bare
    database (``ensure-schema``); a backend other than mongo is a ``ConfigError``."""
    from board_outbox.adapters.mongo.client import reach, seed_hosts

    if require_backend(cfg) != "mongo":
        raise ConfigError(f"store.backend: {command} needs the mongo backend (it is "
                          f"{cfg.store.backend!r}, which keeps no indexes)")
    client = mongo_client(cfg.store)
    try:
        await reach(client, cfg.store.server_selection_timeout_seconds, seed_hosts(cfg.store.uri))
        yield client[cfg.store.database]
    finally:
        await client.close()


BACKENDS: dict[str, Opener] = {"memory": _memory, "mongo": _mongo}

LAUNCHERS: dict[str, Callable[[LauncherConfig], Launcher]] = {
    "log": lambda _cfg: LogLauncher(),
    "http": lambda cfg: HttpLauncher(cfg.url, cfg.timeout_seconds),
}


def make_launcher(cfg: LauncherConfig) -> Launcher:
    return LAUNCHERS[cfg.kind](cfg)


@asynccontextmanager
async def open_backend(cfg: Config, *, ensure_schema: bool = False) -> AsyncIterator[Stores]:
    """The configured backend's ports, as an async context manager (the launcher's connection
    pool, if it has one, is closed on the way out). A configuration that names no backend is
    refused here, before anything opens (O10)."""
    backend = require_backend(cfg)
    launcher = make_launcher(cfg.launcher)
    try:
        async with BACKENDS[backend](cfg, launcher, ensure_schema) as stores:
            # read models by generation: readers see the live one while a shadow rebuild runs
            yield versioned(stores, SystemClock(), cfg.store.generation_cache_seconds)
    finally:
        aclose = getattr(launcher, "aclose", None)
        if aclose is not None:
            await aclose()
