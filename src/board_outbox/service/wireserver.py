"""A MongoDB-wire server in a child process: SecantusDB's ``secantusd-py`` daemon.

This module only *starts a program* (the optional ``embedded`` extra installs it); it never
imports the server's code, which stays GPL-2.0-only behind the process boundary. Used by
``board-outbox demo --store embedded``, the benchmarks and the live test fixture.

The server advertises a single-node replica set named ``secantus``, so pymongo opens change
streams on it. It is a stand-in for mongod, not mongod: see "What the wire server cannot prove"
in docs/testing.md.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXECUTABLE = "secantusd-py"
REPLICA_SET = "secantus"


class WireServerUnavailable(RuntimeError):
    """The server program is missing or did not come up; the message says which, in one line."""


def find_executable() -> str | None:
    """``secantusd-py`` beside this interpreter (the venv's bin), else on PATH."""
    beside = Path(sys.executable).parent / EXECUTABLE
    if beside.exists() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(EXECUTABLE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class WireServer:
    """One ``secantusd-py`` process on a loopback port.

    ``storage=None`` uses a temp dir removed on ``close()``; a path is kept (and reopened by
    ``restart()``). ``test_commands`` enables ``configureFailPoint``; ``oplog_max_entries``
    caps the oplog so an old resume token fails with a real ``ChangeStreamHistoryLost`` (286).
    """

    storage: str | None = None
    port: int = 0
    test_commands: bool = False
    oplog_max_entries: int | None = None
    oplog_retention_seconds: float | None = None
    log_level: str = "WARNING"
    start_timeout: float = 30.0
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False, repr=False)
    _log: Path | None = field(default=None, init=False, repr=False)

    @property
    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?replicaSet={REPLICA_SET}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> WireServer:
        exe = find_executable()
        if exe is None:
            raise WireServerUnavailable(
                f"{EXECUTABLE} not found (pip install 'board-outbox[embedded]')")
        if self.storage is None and self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="board-outbox-wire-")
        data = self.storage or (self._tmp.name if self._tmp else "")
        Path(data).mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        self._log = Path(data).parent / f"secantusd-{self.port}.log" if self.storage else \
            Path(data) / "secantusd.log"
        args = [exe, "--host", "127.0.0.1", "--port", str(self.port), "--storage-path",
                str(Path(data) / "db"), "--log-level", self.log_level]
        if self.test_commands:
            args.append("--enable-test-commands")
        if self.oplog_max_entries is not None:
            args += ["--oplog-max-entries", str(self.oplog_max_entries)]
        if self.oplog_retention_seconds is not None:
            args += ["--oplog-retention-seconds", str(self.oplog_retention_seconds)]
        logf = open(self._log, "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            self._proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            logf.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        from pymongo import MongoClient
        from pymongo.errors import PyMongoError

        deadline = time.monotonic() + self.start_timeout
        client: MongoClient[dict[str, Any]] = MongoClient(
            f"mongodb://127.0.0.1:{self.port}/?directConnection=true",
            serverSelectionTimeoutMS=500, connectTimeoutMS=500)
        try:
            while True:
                assert self._proc is not None
                if self._proc.poll() is not None:
                    raise WireServerUnavailable(
                        f"{EXECUTABLE} exited with status {self._proc.returncode} at start-up "
                        f"({self._tail_log()})")
                try:
                    if client.admin.command("hello").get("isWritablePrimary"):
                        return
                except PyMongoError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise WireServerUnavailable(
                        f"{EXECUTABLE} did not answer on port {self.port} within "
                        f"{self.start_timeout:.0f}s ({self._tail_log()})")
                time.sleep(0.1)
        finally:
            client.close()

    def _tail_log(self) -> str:
        try:
            assert self._log is not None
            lines = self._log.read_text(errors="replace").strip().splitlines()
        except (OSError, AssertionError):
            return "no log"
        return lines[-1][:200] if lines else "empty log"

    def info(self) -> dict[str, str]:
        """Name, version and address, for headers and benchmark JSON."""
        from pymongo import MongoClient

        client: MongoClient[dict[str, Any]] = MongoClient(self.uri, serverSelectionTimeoutMS=5000)
        try:
            status = client.admin.command("serverStatus")
        finally:
            client.close()
        sec = status.get("secantus") or {}
        return {"server": "SecantusDB", "server_version": str(sec.get("version", "?")),
                "wire_version": str(status.get("version", "?")), "address": f"127.0.0.1:{self.port}"}

    def stop(self, timeout: float = 20.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL: a crash, not a shutdown."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    def restart(self) -> None:
        """Stop and start again on the same port and storage."""
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> WireServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
