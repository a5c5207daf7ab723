"""Open the configured backend: the embedded in-memory store or a MongoDB replica set."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from .config import Config, LauncherConfig
from .launchers import HttpLauncher, LogLauncher
from .memory import MemoryBackend
from .ports import Launcher
from .runtime import Stores


def make_launcher(cfg: LauncherConfig) -> Launcher:
    if cfg.kind == "http":
        return HttpLauncher(cfg.url, cfg.timeout_seconds)
    return LogLauncher()


@asynccontextmanager
async def open_backend(cfg: Config, *, ensure_schema: bool = False) -> AsyncIterator[Stores]:
    launcher = make_launcher(cfg.launcher)
    if cfg.store.backend == "memory":
        yield MemoryBackend().stores(launcher)
        return
    from .mongo import ensure_schema as ensure
    from .mongo import make_client, mongo_stores

    client = make_client(cfg.store)
    try:
        db = client[cfg.store.database]
        if ensure_schema:
            await ensure(db)
        yield mongo_stores(db, launcher, change_feed=cfg.tail.change_streams)
    finally:
        await client.close()
