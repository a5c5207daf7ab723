"""A real single-node replica set for the live tests.

``MONGODB_URI`` set: use that deployment (it must be a replica set for change streams).
Otherwise, ``mongod`` on PATH: start ``mongod --replSet rs0`` on a free loopback port in a temp
dir, initiate the set, wait for a primary, and tear it all down at the end of the session.
Neither: the live tests skip, and say why.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

SKIP_REASON = (
    "no real MongoDB: set MONGODB_URI to a replica set, or put mongod on PATH "
    "(no registry this machine reaches ships a mongod binary)"
)


def live_available() -> bool:
    return bool(os.environ.get("MONGODB_URI")) or shutil.which("mongod") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def replica_set() -> Iterator[str]:
    """Yield a connection URI to a primary of a replica set."""
    uri = os.environ.get("MONGODB_URI")
    if uri:
        yield uri
        return
    mongod = shutil.which("mongod")
    assert mongod is not None
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="board-outbox-mongod-") as tmp:
        log = os.path.join(tmp, "mongod.log")
        proc = subprocess.Popen(
            [mongod, "--replSet", "rs0", "--bind_ip", "127.0.0.1", "--port", str(port),
             "--dbpath", tmp, "--logpath", log, "--oplogSize", "64",
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
