"""One board-outbox replica process over the store server (the load test starts four)."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

import anyio

from board_outbox.ports import LaunchRequest
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from tests.harness.storeserver import Connection


class RecordingLauncher:
    """Launches into a ``loadtest_launches`` collection, so the driver can count them."""

    def __init__(self, db: Any) -> None:
        self.coll = db["loadtest_launches"]

    async def launch(self, req: LaunchRequest) -> str:
        res = await self.coll.insert_one({"row_key": req.row_key, "tenant_id": req.tenant_id})
        return str(res.inserted_id)


async def run(port: int, name: str, mongo_uri: str | None = None, db_name: str = "") -> None:
    client: Any = None
    if mongo_uri:
        from pymongo import AsyncMongoClient

        from board_outbox.adapters.mongo import mongo_stores

        client = AsyncMongoClient(mongo_uri, tz_aware=True)
        db = client[db_name]
        stores = mongo_stores(db, RecordingLauncher(db))
    else:
        stores = Connection("127.0.0.1", port).stores()
    cfg = load_config(env={}, projections=[],
                      tail={"poll_interval_seconds": 0.5 if mongo_uri else 0.05, "seed": "earliest",
                            "batch_size": 500, "change_streams": bool(mongo_uri)},
                      # on a real server a claim batch must fit within its lease (the wire server
                      # is far slower per command than the loopback store server)
                      worker={"lease_seconds": 15 if mongo_uri else 3, "idle_seconds": 0.05,
                              "batch_size": 10 if mongo_uri else 50,
                              "backoff_base_seconds": 0.1, "backoff_cap_seconds": 1},
                      service={"replica_name": name, "shutdown_grace_seconds": 2})
    service = Service(stores, cfg)
    async with anyio.create_task_group() as tg:
        async def signals() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as sigs:
                async for _ in sigs:
                    service.stop()
                    return

        tg.start_soon(signals)
        await service.run()
        tg.cancel_scope.cancel()
    if client is not None:
        await client.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, default=0, help="the store server's port")
    ap.add_argument("--mongo-uri", help="use a real replica set instead of the store server")
    ap.add_argument("--db", default="", help="database name (with --mongo-uri)")
    ap.add_argument("--name", default="replica")
    args = ap.parse_args()
    anyio.run(run, args.port, args.name, args.mongo_uri, args.db)
    return 0


if __name__ == "__main__":
    sys.exit(main())
