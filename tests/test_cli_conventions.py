"""The command line's conventions: ``--config`` before or after the command (the command's own
wins), ``--json`` on every command that prints a table or a record, shell completion from the
parser, one-line refusals of bad input, a reader that closes the pipe early, and an unreachable
store as one line naming the host, the cause and what to check -- within
``store.server_selection_timeout_seconds``, which governs that wait (not the op timeout)."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.service.wireserver import free_port
from board_outbox.surface.cli import main
from board_outbox.surface.cli.parser import build_parser
from tests.test_admin_cli import _dead_letters, factory_for

# (command path) -> prints a table or a record, so it takes --json
RECORDS = [
    ("status",), ("paused",), ("explain",), ("audit",), ("replay",), ("doctor",),
    ("ensure-schema",), ("rebuild",), ("pause",), ("resume",),
    ("cursor", "show"), ("cursor", "reset"),
    ("dead-letters", "list"), ("dead-letters", "show"), ("dead-letters", "replay"),
    ("dead-letters", "purge"),
    ("subscriptions", "list"), ("subscriptions", "show"), ("subscriptions", "add"),
    ("subscriptions", "edit"), ("subscriptions", "disable"), ("subscriptions", "enable"),
    ("subscriptions", "rm"), ("rows", "cancel"), ("rows", "rerun"), ("rows", "find"),
    ("api-tokens", "create"), ("api-tokens", "list"), ("api-tokens", "revoke"),
]
NO_RECORD = {("run",), ("console",), ("demo",), ("completion",)}  # logs, pages, a script


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
            ) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {path: parser}
    out = {}
    for name, child in subs[0].choices.items():
        out.update(_leaves(child, (*path, name)))
    return out


def test_every_command_that_prints_a_table_or_a_record_takes_json() -> None:
    leaves = _leaves(build_parser())
    assert set(leaves) == set(RECORDS) | NO_RECORD  # a new command is sorted into one of them
    for path in RECORDS:
        opts = {o for a in leaves[path]._actions for o in a.option_strings}
        assert "--json" in opts, path


@pytest.mark.parametrize("argv", [
    ["--config", "A", "dead-letters", "list"],
    ["dead-letters", "--config", "A", "list"],
    ["dead-letters", "list", "--config", "A"],
    ["--config", "B", "dead-letters", "list", "--config", "A"],  # the command's own wins
    ["--config", "A", "status"], ["status", "--config", "A"],
    ["subscriptions", "--config", "A", "list"], ["--config", "A", "doctor"],
])
def test_config_before_or_after_the_command(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).config == "A"


def test_config_before_the_command_is_the_file_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text('[store]\nbackend = "memory"\n[retention]\ndone_seconds = 90\n')
    assert main(["--config", str(conf), "status"]) == 2  # its bad setting proves it was read
    assert "retention.done_seconds" in capsys.readouterr().err


def test_json_documents_of_the_records(capsys: pytest.CaptureFixture[str]) -> None:
    backend = MemoryBackend()
    keys = anyio.run(_dead_letters, backend)

    def cli(*args: str) -> Any:
        assert main(list(args), factory=factory_for(backend)) in (0, 1)
        return json.loads(capsys.readouterr().out)

    row = cli("dead-letters", "show", keys[0], "--json")
    assert row["row_key"] == keys[0] and row["state"] == "failed"
    shown = cli("cursor", "show", "--tenant", "t1", "--json")
    assert shown == {"schema": 1, "tenant_id": "t1", "cursor": 3, "cursor_problem": None,
                     "counter": 3, "held": None, "ahead": False}
    reset = cli("cursor", "reset", "--tenant", "t1", "--to", "2", "--json")
    assert reset == {"schema": 1, "tenant_id": "t1", "before": 3, "after": 2, "counter": 3}
    assert cli("pause", "--tenant", "t1", "--reason", "x", "--json")["new"] is True
    assert cli("resume", "--tenant", "t1", "--json")["lifted"] is True
    replayed = cli("dead-letters", "replay", keys[0], "--json")
    assert replayed == {"schema": 1, "replayed": [keys[0]], "left_alone": []}
    plan = cli("dead-letters", "replay", "--filter", "tenant=t1", "--dry-run", "--json")
    assert plan["matched"] == 2 and plan["by_tenant"] == {"t1": 2}
    assert cli("dead-letters", "purge", "--tenant", "t2", "--yes", "--json") == {
        "schema": 1, "purged": 1}
    anyio.run(backend.board.put, Card(tenant_id="t1", card_id="c"))
    rebuilt = cli("rebuild", "board-reflect", "--tenant", "t1", "--json")
    assert rebuilt["projection"] == "board-reflect" and rebuilt["applied"] == 3


def test_completion_scripts_come_from_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    for word in ("subscriptions", "doctor", "dead-letters", "--config", "--json", "disable"):
        assert word in script, word
    if shutil.which("bash"):
        check = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True,
                               timeout=30)
        assert check.returncode == 0, check.stderr
    assert main(["completion", "zsh"]) == 0
    assert "#compdef board-outbox" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["completion", "fish-or-chips"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice: 'fish-or-chips'" in err


def test_a_reader_that_closes_the_pipe_early_is_no_traceback() -> None:
    proc = subprocess.run(f"{sys.executable} -m board_outbox completion bash | head -1",
                          shell=True, capture_output=True, text=True, timeout=60)
    assert proc.stdout.startswith("#") and proc.stderr == ""


def _status(uri: str, tmp_path: Path, extra: str = "") -> tuple[int, str, float]:
    import contextlib
    import io

    conf = tmp_path / "c.toml"
    conf.write_text(f'[store]\nbackend = "mongo"\nuri = "{uri}"\n{extra}')
    err = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stderr(err):
        code = main(["status", "--config", str(conf)])
    return code, err.getvalue(), time.monotonic() - started


def test_an_unreachable_store_is_one_line_with_the_host_the_cause_and_what_to_check(
        tmp_path: Path) -> None:
    port = free_port()
    code, err, _ = _status(f"mongodb://ops:hunter2pass@127.0.0.1:{port}/?replicaSet=rs0",
                           tmp_path, "server_selection_timeout_seconds = 0.5\n")
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith(f"board-outbox: store unavailable: cannot reach the store at "
                          f"127.0.0.1:{port} within 0.5 s")
    assert "connection refused" in err and "check store.uri's host and port" in err
    assert "hunter2pass" not in err and "Topology" not in err


def test_server_selection_timeout_governs_the_wait_not_the_op_timeout(tmp_path: Path) -> None:
    """A 2 s server selection under a 1 s op timeout waits 2 s (the op timeout once replaced
    it: the setting had no effect); a 0.3 s one under a 10 s op timeout gives up in 0.3 s."""
    port = free_port()
    uri = f"mongodb://127.0.0.1:{port}/"
    code, err, long = _status(uri, tmp_path, "server_selection_timeout_seconds = 2\n"
                                             "op_timeout_seconds = 1\n")
    assert code == 1 and "within 2 s" in err
    code, err, short = _status(uri, tmp_path, "server_selection_timeout_seconds = 0.3\n")
    assert code == 1 and "within 0.3 s" in err
    assert long >= 1.9 and short < 1.5, (long, short)


def test_on_the_wire_a_replica_set_name_that_does_not_match_says_so(
        live_uri: str, tmp_path: Path) -> None:
    base = live_uri.split("?")[0]
    code, err, _ = _status(f"{base}?replicaSet=not-this-one", tmp_path,
                           "server_selection_timeout_seconds = 1\n")
    assert code == 1 and err.count("\n") == 1
    assert "no member of replica set 'not-this-one' answered" in err
    assert "check replicaSet= in store.uri" in err


def test_bad_arguments_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["status", "--tenant"], ["cursor", "reset", "--tenant", "t", "--to", "x"],
                 ["nope"], ["dead-letters", "list", "--limit", "0"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error:" in err and "--help` shows the usage" in err


def test_a_store_lost_mid_command_is_one_short_line_too() -> None:
    """After the first contact an operation's timeout is classified like any store error: the
    driver's topology dump and configured timeouts are cut from the line (and from the logs)."""
    from pymongo.errors import ServerSelectionTimeoutError

    from board_outbox.adapters.mongo.errors import classify
    from board_outbox.model.errors import StoreUnavailable

    exc = ServerSelectionTimeoutError(
        "db1:27017: [Errno 111] Connect call failed ('10.0.0.5', 27017) (configured timeouts: "
        "socketTimeoutMS: 5000.0ms, connectTimeoutMS: 5000.0ms), Timeout: 9.99s, Topology "
        "Description: <TopologyDescription id: 6b1, topology_type: ReplicaSetNoPrimary, servers: "
        "[<ServerDescription ('db1', 27017) server_type: Unknown, rtt: None>]>")
    got = classify(exc, "MongoEventLog.heads")
    assert isinstance(got, StoreUnavailable)
    assert str(got) == ("MongoEventLog.heads: ServerSelectionTimeoutError: db1:27017: [Errno 111] "
                        "Connect call failed ('10.0.0.5', 27017)")
