"""A real MongoDB-wire server for the live tests, picked in this order (SPEC W1):

1. ``MONGODB_URI``: that deployment (it must be a replica set for change streams);
2. ``mongod`` on PATH: a throw-away ``mongod --replSet rs0`` on a free loopback port;
3. SecantusDB's ``secantusd-py`` (the dev extra installs it): a separate process on a free
   loopback port with temp storage and ``--enable-test-commands``;
4. none of these: the live tests skip, and say why.

The pytest header names the server, its version and its address.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from board_outbox.service.wireserver import WireServer, find_executable, free_port

SKIP_REASON = (
    "no MongoDB-wire server: set MONGODB_URI to a replica set, put mongod on PATH, "
    "or install the dev extra (SecantusDB's secantusd-py)"
)


def live_kind() -> str | None:
    if os.environ.get("MONGODB_URI"):
        return "MONGODB_URI"
    if shutil.which("mongod"):
        return "mongod"
    if find_executable():
        return "secantus"
    return None


def live_available() -> bool:
    return live_kind() is not None


@dataclass
class LiveServer:
    uri: str
    kind: str  # MONGODB_URI | mongod | secantus
    server: WireServer | None = None  # set when we started SecantusDB ourselves

    def describe(self) -> str:
        from pymongo import MongoClient

        client: MongoClient[dict[str, Any]] = MongoClient(self.uri, serverSelectionTimeoutMS=5000)
        try:
            status = client.admin.command("serverStatus")
            hello = client.admin.command("hello")
            host, port = client.address or ("?", 0)
        finally:
            client.close()
        sec = status.get("secantus")
        name = f"SecantusDB {sec.get('version')}" if isinstance(sec, dict) else "mongod"
        return (f"{name} (wire {status.get('version')}, maxWireVersion {hello.get('maxWireVersion')}, "
                f"replica set {hello.get('setName')!r}) at {host}:{port}, via {self.kind}")

    def failpoints(self) -> bool:
        """Whether ``configureFailPoint`` works here (test commands enabled)."""
        from pymongo import MongoClient
        from pymongo.errors import PyMongoError

        client: MongoClient[dict[str, Any]] = MongoClient(self.uri, serverSelectionTimeoutMS=5000)
        try:
            client.admin.command("configureFailPoint", "failCommand", mode="off")
            return True
        except PyMongoError:
            return False
        finally:
            client.close()


@contextmanager
def live_server() -> Iterator[LiveServer]:
    kind = live_kind()
    if kind == "MONGODB_URI":
        yield LiveServer(os.environ["MONGODB_URI"], kind)
    elif kind == "mongod":
        with _mongod() as uri:
            yield LiveServer(uri, kind)
    elif kind == "secantus":
        with WireServer(test_commands=True) as server:
            yield LiveServer(server.uri, kind, server)
    else:
        raise RuntimeError(SKIP_REASON)


@contextmanager
def replica_set() -> Iterator[str]:
    """Yield a connection URI to a primary of a replica set."""
    with live_server() as live:
        yield live.uri


@contextmanager
def _mongod() -> Iterator[str]:
    mongod = shutil.which("mongod")
    assert mongod is not None
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="board-outbox-mongod-") as tmp:
        log = os.path.join(tmp, "mongod.log")
        proc = subprocess.Popen(
            [mongod, "--replSet", "rs0", "--bind_ip", "127.0.0.1", "--port", str(port),
             "--dbpath", tmp, "--logpath", log, "--oplogSize", "64",
             "--setParameter", "enableTestCommands=1",
             "--setParameter", "transactionLifetimeLimitSeconds=30"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            _initiate(port, log, proc)
            yield f"mongodb://127.0.0.1:{port}/?replicaSet=rs0&directConnection=false"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def _initiate(port: int, log: str, proc: subprocess.Popen[bytes]) -> None:
    from pymongo import MongoClient
    from pymongo.errors import OperationFailure, PyMongoError

    deadline = time.monotonic() + 60
    client: MongoClient[dict[str, object]] = MongoClient(
        f"mongodb://127.0.0.1:{port}/?directConnection=true", serverSelectionTimeoutMS=1000
    )
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"mongod exited with {proc.returncode}; see {log}")
            try:
                client.admin.command("ping")
                break
            except PyMongoError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        try:
            client.admin.command("replSetInitiate", {
                "_id": "rs0", "members": [{"_id": 0, "host": f"127.0.0.1:{port}"}]})
        except OperationFailure as exc:
            if exc.code != 23:  # AlreadyInitialized
                raise
        while not client.admin.command("hello").get("isWritablePrimary"):
            if time.monotonic() > deadline:
                raise RuntimeError("replica set never elected a primary")
            time.sleep(0.2)
    finally:
        client.close()
