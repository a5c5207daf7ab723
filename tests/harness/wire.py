"""The fault harness over a real MongoDB-wire server (``--store wire``): the Mongo adapters on
pymongo's ``AsyncMongoClient``, and, between turns, ``failCommand`` failpoints armed on the
server itself (dropped connections, not-primary, shutdown, step-down, max-time), scoped by
``appName`` to the replicas' client. The simulation's own injected faults still run as well.

The server: ``MONGODB_URI`` (it must allow test commands), else SecantusDB's ``secantusd-py``
started once per process with ``--enable-test-commands``.
"""

from __future__ import annotations

import atexit
import os
import uuid
from typing import Any

from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.model.epoch import EPOCH_KEY
from board_outbox.service.wireserver import WireServer

APP = "bo-harness"
WIRE_FAULTS: dict[str, dict[str, Any]] = {
    "closeConnection": {"closeConnection": True},
    "NotWritablePrimary": {"errorCode": 10107},
    "InterruptedAtShutdown": {"errorCode": 11600},
    "ShutdownInProgress": {"errorCode": 91},
    "PrimarySteppedDown": {"errorCode": 189},
    "MaxTimeMSExpired": {"errorCode": 50},
}
COMMANDS = ("find", "update", "findAndModify", "aggregate", "distinct", "insert", "delete")
ARM_PERCENT = 5  # of turns

_server: WireServer | None = None


def server_uri() -> str:
    global _server
    uri = os.environ.get("MONGODB_URI")
    if uri:
        return uri
    if _server is None:
        _server = WireServer(test_commands=True).start()
        atexit.register(_server.close)
    return _server.uri


class WireSimStore:
    """A fresh database per schedule on the wire server; raw access through a sync client."""

    def __init__(self) -> None:
        from pymongo import AsyncMongoClient, MongoClient

        from board_outbox.adapters.mongo import mongo_stores
        from board_outbox.ports import Stores

        uri = server_uri()
        self.name = f"bo_harness_{uuid.uuid4().hex[:10]}"
        # no driver retries: a failpoint that fires reaches our code as StoreUnavailable
        self.client: Any = AsyncMongoClient(uri, appname=APP, tz_aware=True, retryWrites=False,
                                            retryReads=False, serverSelectionTimeoutMS=10000)
        self.sync: Any = MongoClient(uri, tz_aware=True)
        self.db = self.client[self.name]
        self.raw = self.sync[self.name]
        self.stores: Stores = mongo_stores(self.db, MemoryLauncher(), change_feed=False)
        self.armed = False

    async def prepare(self) -> None:
        from board_outbox.adapters.mongo import ensure_schema

        await ensure_schema(self.db)

    def between_turns(self, choose: Any, faults_on: bool) -> str | None:
        """Maybe arm one failpoint for the next matching command; off once faults stop."""
        if not faults_on:
            self.disarm()
            return None
        if choose(100) >= ARM_PERCENT:
            return None
        name = sorted(WIRE_FAULTS)[choose(len(WIRE_FAULTS))]
        command = COMMANDS[choose(len(COMMANDS))]
        self._configure({"times": 1}, {"failCommands": [command], "appName": APP,
                                       **WIRE_FAULTS[name]})
        self.armed = True
        return f"wire failCommand {command}: {name}"

    def disarm(self) -> None:
        if self.armed:
            self._configure("off")
            self.armed = False

    def _configure(self, mode: Any, data: dict[str, Any] | None = None) -> None:
        self.sync.admin.command("configureFailPoint", "failCommand", mode=mode, data=data or {})

    def allocate(self, tenant: str) -> int:
        from pymongo import ReturnDocument

        doc = self.raw["board_event_counters"].find_one_and_update(
            {"_id": tenant}, {"$inc": {"seq": 1}}, upsert=True, return_document=ReturnDocument.AFTER)
        return int(doc["seq"])

    def insert(self, doc: dict[str, Any]) -> None:
        self.raw["board_events"].insert_one(dict(doc))

    def cursors(self) -> dict[str, int]:
        return {d["_id"]: d["seq"] for d in self.raw["trigger_cursors"].find({})
                if d["_id"] != EPOCH_KEY}  # the store's epoch is no tenant's cursor

    def row_docs(self) -> list[dict[str, Any]]:
        return list(self.raw["trigger_effects"].find({}))

    async def close(self) -> None:
        if self.armed:
            self._configure("off")
        self.sync.drop_database(self.name)
        self.sync.close()
        await self.client.close()
