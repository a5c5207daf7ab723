from __future__ import annotations

import subprocess
import sys

import pytest

from board_outbox.surface.cli import main


def test_demo_runs_and_verifies(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["demo", "--events", "200", "--rate", "4000", "--tenants", "2"])  # on the wire
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "OK: every event materialized once" in out
    assert "rows pending" in out and "launches" in out and "projection updates" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["demo", "--events", "0"], "expected a number > 0"),
        (["demo", "--failure-rate", "2"], "between 0 and 1"),
        (["demo", "--tenants", "many"], "expected a whole number"),
        (["teleport"], "invalid choice"),
    ],
)
def test_bad_arguments_are_one_line_errors_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_help_explains_every_command() -> None:
    out = subprocess.run([sys.executable, "-m", "board_outbox", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "demo" in out and "exactly-once" in out
    demo = subprocess.run([sys.executable, "-m", "board_outbox", "demo", "--help"],
                          capture_output=True, text=True, check=True).stdout
    assert "--failure-rate" in demo and "synthetic board" in demo
