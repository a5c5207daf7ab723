"""``board-outbox demo``: the whole pipeline with a synthetic board, on the embedded wire server
(default) or the in-memory backend."""

from __future__ import annotations

import argparse

from board_outbox.surface.cli.commands import StoresFactory


async def cmd_demo(args: argparse.Namespace, factory: StoresFactory) -> int:
    """The demo wires its own backend: an embedded wire server or the in-memory twin."""
    from board_outbox.service.telemetry import setup_telemetry
    from board_outbox.surface.demo import DemoOptions, run_demo

    opts = DemoOptions(
        tenants=args.tenants, events=args.events, rate=args.rate,
        failure_rate=args.failure_rate, seed=args.seed, timeout=args.timeout,
        store=args.store, storage=args.storage,
        projections=tuple(args.projection),
    )
    tel = setup_telemetry(replica="demo")  # exports only when OTEL_* asks for it
    try:
        return await run_demo(opts)
    finally:
        tel.shutdown()
