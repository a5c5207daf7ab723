"""``board-outbox demo``: the whole pipeline on the in-memory backend with a synthetic board."""

from __future__ import annotations

import argparse

from . import StoresFactory


async def cmd_demo(args: argparse.Namespace, factory: StoresFactory) -> int:
    """The demo wires its own in-memory backend (it reads the twins' records to check itself)."""
    from ...demo import DemoOptions, run_demo
    from ...telemetry.sdk import setup_telemetry

    opts = DemoOptions(
        tenants=args.tenants, events=args.events, rate=args.rate,
        failure_rate=args.failure_rate, seed=args.seed, timeout=args.timeout,
        projections=tuple(args.projection),
    )
    tel = setup_telemetry(replica="demo")  # exports only when OTEL_* asks for it
    try:
        return await run_demo(opts)
    finally:
        tel.shutdown()
