"""List-valued settings from the environment (a Kubernetes Deployment sets them that way): a JSON
array or a comma-separated list, each entry then checked like the file's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from board_outbox.model.errors import ConfigError
from board_outbox.service.config import load_config


@pytest.mark.parametrize(("value", "expected"), [
    ('["10.0.0.2", "10.0.0.0/8"]', ["10.0.0.2", "10.0.0.0/8"]),
    ("10.0.0.2,10.0.0.0/8", ["10.0.0.2", "10.0.0.0/8"]),
    (" 10.0.0.2 , fd00::/8 ,", ["10.0.0.2", "fd00::/8"]),
    ("10.0.0.2", ["10.0.0.2"]),
    ("", []),
    ("[]", []),
])
def test_trusted_proxies_from_the_environment(value: str, expected: list[str]) -> None:
    cfg = load_config(env={"BOARD_OUTBOX_UI__TRUSTED_PROXIES": value})
    assert cfg.ui.trusted_proxies == expected


def test_allowed_hosts_from_the_environment_override_the_file(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[service]\nallowed_hosts = ["old.example"]\n')
    assert load_config(f, env={}).service.allowed_hosts == ["old.example"]
    cfg = load_config(f, env={"BOARD_OUTBOX_SERVICE__ALLOWED_HOSTS": "ops.example.internal,board-outbox"})
    assert cfg.service.allowed_hosts == ["ops.example.internal", "board-outbox"]
    cfg = load_config(f, env={"BOARD_OUTBOX_SERVICE__ALLOWED_HOSTS": '["ops.example.internal"]'})
    assert cfg.service.allowed_hosts == ["ops.example.internal"]


@pytest.mark.parametrize(("env", "message"), [
    ({"BOARD_OUTBOX_UI__TRUSTED_PROXIES": '["10.0.0.2",'},
     "ui.trusted_proxies (BOARD_OUTBOX_UI__TRUSTED_PROXIES): not a JSON array"),
    ({"BOARD_OUTBOX_UI__TRUSTED_PROXIES": "[1, 2]"},
     "ui.trusted_proxies (BOARD_OUTBOX_UI__TRUSTED_PROXIES): Expected `str`, got `int`"),
    ({"BOARD_OUTBOX_UI__TRUSTED_PROXIES": "10.0.0.5/8"},
     "ui.trusted_proxies: '10.0.0.5/8' is not an address or network"),
    ({"BOARD_OUTBOX_SERVICE__ALLOWED_HOSTS": "ok.example, bad/host"},
     "service.allowed_hosts: 'bad/host' is not a host name"),
])
def test_a_bad_list_from_the_environment_names_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(env=env)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_the_cli_takes_a_list_from_the_environment() -> None:
    """End to end, as the Deployment runs it: one line and exit 2 for a bad list, and the
    command runs with a good one (``doctor`` needs no store to print the config check)."""
    base = {"BOARD_OUTBOX_STORE__BACKEND": "memory", "PATH": "/usr/bin:/bin"}
    bad = subprocess.run([sys.executable, "-m", "board_outbox", "status"],
                         env={**base, "BOARD_OUTBOX_UI__TRUSTED_PROXIES": "[oops"},
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2, bad.stderr
    assert "ui.trusted_proxies" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    good = subprocess.run([sys.executable, "-m", "board_outbox", "status"],
                          env={**base, "BOARD_OUTBOX_UI__TRUSTED_PROXIES": "10.0.0.0/8, fd00::/8"},
                          capture_output=True, text=True, timeout=60)
    assert good.returncode == 0, good.stderr
