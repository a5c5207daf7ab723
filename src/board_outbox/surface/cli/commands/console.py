"""``board-outbox console``: the operator's web console alone, against the configured store,
until SIGTERM/SIGINT (the same pages ``run`` serves under ``/ui`` when ``[ui] enabled``)."""

from __future__ import annotations

import argparse
import logging
import signal

import anyio

from board_outbox.surface.cli.commands import StoresFactory

log = logging.getLogger("board_outbox")


async def cmd_console(args: argparse.Namespace, factory: StoresFactory) -> int:
    from starlette.responses import RedirectResponse, Response
    from starlette.routing import Route

    from board_outbox.service.config import load_config
    from board_outbox.service.logs import setup_logging
    from board_outbox.surface.console import build_console
    from board_outbox.surface.http import serve_app
    from board_outbox.surface.http.app import build_app
    from board_outbox.surface.http.proxies import proxy_settings

    cfg = load_config(args.config)
    setup_logging(cfg.service.log_format, cfg.service.log_level)
    host = args.host if args.host is not None else cfg.ui.host
    port = args.port if args.port is not None else cfg.ui.port

    async def home(_request: object) -> Response:
        return RedirectResponse("/ui/", status_code=307)

    async with factory(cfg) as stores:
        from board_outbox.surface.api import build_api

        app = build_app([Route("/", home, methods=["GET"])], ui=build_console(stores, cfg),
                        api=build_api(stores, cfg),
                        not_found="not found: the console is under /ui/")
        async with serve_app(app, host, port, setting="ui.port",
                             allowed_hosts=cfg.service.allowed_hosts,
                             proxies=proxy_settings(cfg.ui)) as server:
            log.info("console on http://%s:%d/ui/ (%s)", host, server.port,
                     "admin token set: log in to replay" if cfg.ui.admin_token else "read-only")
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for sig in signals:
                    log.info("%s: console stopping", signal.Signals(sig).name)
                    break
    return 0
