"""One board-outbox replica process over the store server (the load test starts four)."""

from __future__ import annotations

import argparse
import signal
import sys

import anyio

from board_outbox.config import load_config
from board_outbox.runtime import Service
from tests.harness.storeserver import Connection


async def run(port: int, name: str) -> None:
    conn = Connection("127.0.0.1", port)
    cfg = load_config(env={}, projections=[],
                      tail={"poll_interval_seconds": 0.05, "seed": "earliest", "batch_size": 500,
                            "change_streams": False},
                      worker={"lease_seconds": 3, "idle_seconds": 0.05, "batch_size": 50,
                              "backoff_base_seconds": 0.1, "backoff_cap_seconds": 1},
                      service={"replica_name": name, "shutdown_grace_seconds": 2})
    service = Service(conn.stores(), cfg)
    async with anyio.create_task_group() as tg:
        async def signals() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as sigs:
                async for _ in sigs:
                    service.stop()
                    return

        tg.start_soon(signals)
        await service.run()
        tg.cancel_scope.cancel()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", default="replica")
    args = ap.parse_args()
    anyio.run(run, args.port, args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
