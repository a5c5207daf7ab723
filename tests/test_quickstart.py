"""docs/quickstart-production.md, run as written: every ```sh block of the page is one command,
run in order by bash in an empty directory, against the live suite's wire server (or
``MONGODB_URI``'s replica set), with the installed ``board-outbox`` and ``python`` on PATH.

Two things differ from a reader's run, both named here: the configuration's ``uri`` and
``database`` values are the test's own (its server, a fresh database dropped afterwards: the
page's placeholders would reach no server), and the first command, the install, is not run
(building and installing the wheel takes minutes and an index; tests/test_packaging.py builds it)
-- instead the ``board-outbox`` this test runs is checked to be this tree's. ``run`` starts in the
background, as the page's "second terminal"; ``explain`` is repeated until the launch is done, as
a reader who waits a moment. The operator port stays off (``BOARD_OUTBOX_SERVICE__HTTP_PORT=0``,
the suite's default), so no run collides with another's port.

What it would catch: a command the page names that no longer exists or fails, a flag renamed, a
configuration that no longer loads, a producer API that moved, a launch that never happens (the
default ``latest`` seed, which the page keeps: a tenant born after the service's first start is
read from its first event, however soon after ``run`` the event comes), more than ten commands,
and output the page shows that the service no longer prints.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "quickstart-production.md"
INSTALL = "python3 -m venv .venv && . .venv/bin/activate && pip install ."
ROW = "quickstart/1/sub/quickstart.hello"
LAUNCH_LINE = f"INFO board_outbox.launcher: launch hello-bot for {ROW} [tenant_id=quickstart seq=1"


def commands() -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```$", PAGE.read_text(), re.S | re.M)


def test_the_page_is_at_most_ten_commands_from_the_clone_to_the_launch() -> None:
    cmds = commands()
    assert len(cmds) <= 10, cmds
    assert cmds[0].strip() == INSTALL
    kinds = [c.split()[1] if c.startswith("board-outbox ") else c.split()[0] for c in cmds[1:]]
    assert kinds == ["cat", "ensure-schema", "doctor", "subscriptions", "run", "python", "explain"]
    # the output it shows is what the service prints (checked against a real run below)
    assert LAUNCH_LINE in PAGE.read_text()
    # the default seed: the run below proves it launches a new tenant's very first event
    assert "seed" not in cmds[1], cmds[1]


def _own(config: str, uri: str, database: str) -> str:
    """The configuration block with the test's server and database for the placeholders."""
    out, n = re.subn(r'^uri = "[^"]*"', lambda _: f'uri = "{uri}"', config, flags=re.M)
    out, m = re.subn(r'^database = "board_outbox"', f'database = "{database}"', out, flags=re.M)
    assert (n, m) == (1, 1), config
    return out


def _bash(cmd: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-eu", "-o", "pipefail", "-c", cmd], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def _explained_done(cmd: str, cwd: Path, env: dict[str, str], log: Path) -> str:
    deadline = time.monotonic() + 60
    while True:
        got = _bash(cmd, cwd, env)
        if got.returncode == 0 and "state done" in got.stdout:
            return got.stdout
        assert time.monotonic() < deadline, (got.stdout, got.stderr, log.read_text())
        time.sleep(0.5)


@pytest.mark.timeout(150)
def test_every_command_of_the_quickstart_runs_and_the_launch_happens(
        live_uri: str, tmp_path: Path) -> None:
    from pymongo import MongoClient

    import board_outbox

    # the install is not run: the board-outbox on PATH is this tree's, installed from it
    assert Path(board_outbox.__file__).resolve().is_relative_to(ROOT / "src")
    bindir = Path(sys.executable).parent
    assert (bindir / "board-outbox").exists() and (bindir / "python").exists()
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    database = f"quickstart_{uuid.uuid4().hex[:10]}"
    cmds = commands()[1:]
    cmds[0] = _own(cmds[0], live_uri, database)
    run: subprocess.Popen[bytes] | None = None
    log = tmp_path / "run.log"
    outputs: dict[str, str] = {}
    try:
        for cmd in cmds:
            if cmd.startswith("board-outbox run "):
                with log.open("wb") as err:
                    run = subprocess.Popen(["bash", "-c", f"exec {cmd}"], cwd=tmp_path, env=env,
                                           stdout=subprocess.DEVNULL, stderr=err)
                continue
            if cmd.startswith("board-outbox explain "):
                outputs["explain"] = _explained_done(cmd, tmp_path, env, log)
                continue
            got = _bash(cmd, tmp_path, env)
            assert got.returncode == 0, (cmd, got.stdout, got.stderr)
            outputs[cmd.split()[1] if cmd.startswith("board-outbox ") else cmd.split()[0]] = \
                got.stdout
        assert run is not None and run.poll() is None, log.read_text()
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=30) == 0, log.read_text()
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            run.wait()
        client: MongoClient[dict[str, object]] = MongoClient(live_uri)
        try:
            client.drop_database(database)
        finally:
            client.close()
    assert "0 failed" in outputs["doctor"], outputs["doctor"]
    assert outputs["python"].strip() == "emitted card.moved of card-1: tenant quickstart, seq 1"
    assert outputs["explain"].startswith(f"row {ROW}: launch of quickstart.hello, tenant "
                                         "quickstart, seq 1\n  state done, attempts 0 of 8\n")
    assert LAUNCH_LINE in log.read_text()
