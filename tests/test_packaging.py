"""The package as a user installs it: the wheel (built here, without build isolation, so no
index round trip) carries the typing marker, the LICENSE, the built-in projections and every
source file of the tree; its metadata is complete and its version is the one source's;
``board-outbox --version`` prints it; user-facing help names nothing the wheel lacks; the
changelog follows Keep a Changelog."""

from __future__ import annotations

import argparse
import email
import json
import re
import subprocess
import sys
import zipfile
from email.message import Message
from pathlib import Path

import pytest

from board_outbox.__about__ import __version__

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"src/board_outbox": "board_outbox",
            "projections/board_outbox_projections": "board_outbox_projections"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("dist")
    got = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation",
                          "--outdir", str(out), str(ROOT)],
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    (built,) = out.glob("*.whl")
    assert built.name == f"board_outbox-{__version__}-py3-none-any.whl"
    return zipfile.ZipFile(built)


def _metadata(wheel: zipfile.ZipFile) -> Message:
    return email.message_from_bytes(wheel.read(f"board_outbox-{__version__}.dist-info/METADATA"))


def _tracked(folder: str) -> list[str]:
    """The files git tracks under ``folder`` (what a clone has), else every file there."""
    got = subprocess.run(["git", "ls-files", folder], cwd=ROOT, capture_output=True, text=True,
                         timeout=30)
    if got.returncode == 0 and got.stdout.strip():
        return got.stdout.split()
    return [str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts]


def test_the_wheel_carries_the_typing_marker_the_license_and_the_projections(
        wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert {"board_outbox/py.typed", "board_outbox_projections/py.typed"} <= names
    license_file = f"board_outbox-{__version__}.dist-info/licenses/LICENSE"
    assert license_file in names
    assert wheel.read(license_file) == (ROOT / "LICENSE").read_bytes()
    assert b"Apache License" in wheel.read(license_file)
    assert {"board_outbox_projections/board_reflect.py",
            "board_outbox_projections/card_activity.py"} <= names
    # every file of the two packages in the tree is in the wheel (templates included)
    for folder, package in PACKAGES.items():
        for path in _tracked(folder):
            inside = package + path[len(folder):]
            assert inside in names, f"{path} is not in the wheel"
    entry_points = wheel.read(f"board_outbox-{__version__}.dist-info/entry_points.txt").decode()
    assert "board-outbox = board_outbox.surface.cli:main" in entry_points
    assert "board-reflect = board_outbox_projections.board_reflect:BoardReflect" in entry_points
    # nothing from outside the two packages (tests, tracing/, benchmarks) rides along
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"board_outbox", "board_outbox_projections", f"board_outbox-{__version__}.dist-info"}


def test_the_wheel_carries_the_producers_json_schemas(wheel: zipfile.ZipFile) -> None:
    """docs/producing.md sends producers to the schemas in the installed package: one per
    collection they write, each a valid JSON Schema (draft 2020-12)."""
    import jsonschema

    names = {n for n in wheel.namelist() if n.startswith("board_outbox/schemas/")}
    assert names == {f"board_outbox/schemas/{c}.schema.json" for c in (
        "board_events", "board_event_counters", "board_cards", "trigger_subscriptions")}
    for name in names:
        jsonschema.Draft202012Validator.check_schema(json.loads(wheel.read(name)))


def test_the_wheel_metadata_is_complete_and_honest(wheel: zipfile.ZipFile) -> None:
    meta = _metadata(wheel)
    assert meta["Version"] == __version__
    assert meta["License-Expression"] == "Apache-2.0"
    classifiers = meta.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert any(c.startswith("Development Status ::") for c in classifiers)
    python = [c.rsplit(" :: ", 1)[1] for c in classifiers
              if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert f"{sys.version_info[0]}.{sys.version_info[1]}" in python  # the one this suite ran on
    assert meta["Requires-Python"] == ">=3.11"
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Source", "Changelog"} <= set(urls)
    assert meta["Author"] and meta["Summary"]
    assert "ADR" not in meta["Summary"]  # no document outside the repository is cited


def test_the_version_has_one_source_and_the_cli_prints_it() -> None:
    import board_outbox

    assert board_outbox.__version__ == __version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^version\s*=', pyproject, re.M) is None  # not written twice
    assert 'path = "src/board_outbox/__about__.py"' in pyproject
    got = subprocess.run([sys.executable, "-m", "board_outbox", "--version"],
                         capture_output=True, text=True, timeout=30)
    assert got.returncode == 0 and got.stdout.strip() == f"board-outbox {__version__}"


def test_help_names_no_repository_path_the_wheel_lacks() -> None:
    """``--help`` is read by people who installed the wheel: it may not send them to tracing/
    or another folder of the source tree."""
    from board_outbox.surface.cli.parser import build_parser

    def helps(parser: argparse.ArgumentParser) -> list[str]:
        out = [parser.format_help()]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    out += helps(sub)
        return out

    texts = helps(build_parser())
    assert len(texts) > 20
    for text in texts:
        assert not re.search(r"\b(tracing|benchmarks|tests|deploy)/", text), text[:200]


def test_the_changelog_follows_keep_a_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n") and "keepachangelog.com" in text
    sections = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert sections and sections[0] == "Unreleased"
    assert __version__ in text.split("\n## ", 2)[1]  # the version it will be released as
    kinds = set(re.findall(r"^### (\w+)$", text, re.M))
    assert kinds and kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
