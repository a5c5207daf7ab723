"""``board-outbox run``: one replica until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import signal
from contextlib import AsyncExitStack
from typing import Any

import anyio

from board_outbox.surface.cli.commands import StoresFactory

log = logging.getLogger("board_outbox")


async def cmd_run(args: argparse.Namespace, factory: StoresFactory) -> int:
    from board_outbox.service.config import load_config
    from board_outbox.service.logs import setup_logging
    from board_outbox.service.runtime import Service
    from board_outbox.service.telemetry import setup_telemetry

    cfg = load_config(args.config)
    setup_logging(cfg.service.log_format, cfg.service.log_level)
    tel = setup_telemetry(replica=cfg.service.replica_name)
    try:
        async with AsyncExitStack() as stack:
            stores = await stack.enter_async_context(
                factory(cfg, ensure_schema=cfg.store.backend == "mongo"))
            service = Service(stores, cfg)
            host, port = cfg.service.http_host, cfg.service.http_port
            if port:  # 0: endpoints off (O1)
                from board_outbox.surface.http import open_ops_server

                ui = api = None
                if cfg.ui.enabled:  # the console under /ui on the same port
                    from board_outbox.surface.api import build_api
                    from board_outbox.surface.console import build_console

                    ui = build_console(service.stores, cfg, service)
                    api = build_api(service.stores, cfg)  # A8: /api/v1, bearer tokens
                await stack.enter_async_context(open_ops_server(service, host, port, ui=ui,
                                                                api=api))
                log.info("operator endpoints on http://%s:%d (/healthz, /readyz, /metrics%s)",
                         host, port, ", /ui: the console, /api/v1: the API" if ui is not None else "")
            elif cfg.ui.enabled:
                log.warning("[ui] enabled but service.http_port = 0: no console (try "
                            "`board-outbox console`)")
            where = (cfg.store.backend if cfg.store.backend == "memory"
                     else f"mongo database {cfg.store.database!r}")
            log.info("running on %s; projections: %s; %s", where,
                     ", ".join(cfg.projections) or "none",
                     "; ".join(tel.described) or "telemetry off (no OTEL_* exporter set)")
            async with anyio.create_task_group() as tg:
                tg.start_soon(_on_signals, service, tg.cancel_scope)
                await service.run()
                tg.cancel_scope.cancel()
    finally:
        tel.shutdown()
    return 0


async def _on_signals(service: Any, scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for sig in signals:
            if not service.stopping:
                log.info("%s: shutting down gracefully", signal.Signals(sig).name)
                service.stop()
            else:
                log.warning("%s again: cancelling now", signal.Signals(sig).name)
                scope.cancel()
