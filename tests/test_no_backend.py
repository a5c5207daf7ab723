"""No silent backend (O10): without a configuration that names the store, every command that
touches one refuses in one line (exit 2) naming the way out -- a pod that lost its config must
not run on an empty in-memory store and look healthy. The demo keeps its embedded default, and
a configuration (file or environment) that names the backend is obeyed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from board_outbox.surface.cli import main
from board_outbox.surface.cli.parser import build_parser

# every command that opens a store, with the arguments it needs to get that far
STORE_COMMANDS: list[list[str]] = [
    ["status"], ["run"], ["console"], ["ensure-schema"], ["doctor"],
    ["cursor", "show", "--tenant", "t1"], ["cursor", "reset", "--tenant", "t1", "--to", "0"],
    ["dead-letters", "list"], ["dead-letters", "show", "t1/1/sub/s"],
    ["dead-letters", "replay", "t1/1/sub/s"], ["dead-letters", "purge", "--yes"],
    ["dead-letters", "replay", "--filter", "tenant=t1", "--dry-run"],
    ["audit", "--tenant", "t1"], ["replay", "--tenant", "t1", "--since", "1"],
    ["rebuild", "board-reflect", "--tenant", "t1"], ["explain", "t1/1/sub/s"],
    ["pause", "--tenant", "t1", "--force"], ["resume", "--tenant", "t1"], ["paused"],
    ["subscriptions", "list"], ["subscriptions", "show", "s"],
    ["subscriptions", "add", "s", "--tenant", "t1", "--bot", "b"],
    ["subscriptions", "edit", "s", "--priority", "1"], ["subscriptions", "disable", "s"],
    ["subscriptions", "enable", "s"], ["subscriptions", "rm", "s", "--yes"],
    ["rows", "find", "--state", "pending"], ["rows", "cancel", "--filter", "tenant=t1",
                                             "--reason", "r", "--dry-run"],
    ["rows", "rerun", "--filter", "tenant=t1", "--dry-run"], ["api-tokens", "list"],
    ["api-tokens", "create", "--name", "n"], ["api-tokens", "revoke", "0123456789abcdef"],
]
# the commands that never open a store
STORELESS = {"demo", "completion"}


@pytest.fixture(autouse=True)
def _no_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in os.environ if v.startswith("BOARD_OUTBOX_")]:
        monkeypatch.delenv(var)


@pytest.fixture
def _never_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    """A regression would start serving: make that fail at once instead of running on."""
    import board_outbox.service.runtime as runtime
    import board_outbox.surface.http as http

    async def never(*_a: Any, **_k: Any) -> None:
        raise AssertionError("started on a store nobody configured")

    monkeypatch.setattr(runtime.Service, "run", never)
    monkeypatch.setattr(http, "serve_app", never)


def test_every_command_that_touches_a_store_is_listed() -> None:
    """A new command must be added above (or to STORELESS): the list is the parser's."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    listed = {argv[0] for argv in STORE_COMMANDS} | STORELESS
    assert set(sub.choices) == listed  # type: ignore[union-attr,arg-type]


@pytest.mark.usefixtures("_never_serve")
@pytest.mark.parametrize("argv", STORE_COMMANDS, ids=" ".join)
def test_without_a_backend_each_command_refuses_in_one_line(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "store.backend is not set" in err and "--config FILE" in err
    assert 'backend = "memory" for a try-out' in err
    assert out == ""


def test_a_config_without_a_backend_refuses_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text('[store]\nuri = "mongodb://db1:27017/?replicaSet=rs0"\n')
    assert main(["status", "--config", str(conf)]) == 2
    assert "store.backend is not set" in capsys.readouterr().err


def test_naming_the_backend_is_the_way_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text('[store]\nbackend = "memory"\n')
    assert main(["status", "--config", str(conf), "--json"]) == 0
    assert '"tenants": []' in capsys.readouterr().out
    monkeypatch.setenv("BOARD_OUTBOX_STORE__BACKEND", "memory")
    assert main(["paused"]) == 0
    assert "nothing is paused" in capsys.readouterr().out


def test_the_demo_keeps_its_embedded_default_and_completion_needs_no_store(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["demo"])
    assert args.store == "embedded"
    assert main(["demo", "--store", "memory", "--events", "60", "--rate", "4000",
                 "--tenants", "1", "--failure-rate", "0"]) == 0
    assert main(["completion", "bash"]) == 0
    assert "board-outbox" in capsys.readouterr().out
