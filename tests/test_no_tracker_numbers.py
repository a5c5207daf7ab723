"""No tracker numbers where a maintainer or a user reads: the code says what and why in words.

A reader of the source, of ``--help`` or of ``/metrics`` has no access to the project's tracker,
so "(issue 33)" tells them nothing. Requirement ids (``M1``, ``F3``) are fine: docs/design.md
defines them. Checked in every file under ``src/`` and ``projections/`` (code, comments,
docstrings, templates), in the benchmarks' code, in the ``--help`` of every command and
subcommand (the argparse tree walked in-process), and in the description of every metric ``/metrics`` serves.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.surface.cli.parser import build_parser
from board_outbox.surface.http.metrics import ServiceCollector, exposition

ROOT = Path(__file__).resolve().parent.parent
TREES = (ROOT / "src", ROOT / "projections")
# the benchmarks' code (their --help is their docstring); their README and results are a log of
# past measurements, dated, where a figure may name the change it measured
BENCH = ROOT / "benchmarks"
# "issue 33", "Issue 33:", "issues 30/32", "issue #33", and one wrapped over a line break
TRACKER = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)

pytestmark = pytest.mark.timeout(60)


def cited(text: str) -> list[str]:
    return TRACKER.findall(text)


def test_the_pattern_sees_tracker_numbers_and_nothing_else() -> None:
    assert len(cited("held (issue 33); Issue 31: cache; issues 30/32; issue #7; an\n  issue 9")) == 5
    assert cited("F3, M10b, 'tissue 3', an issue with the store, issue-free, S6 (33 rows)") == []


def source_files() -> Iterator[Path]:
    for tree in TREES:
        for path in sorted(tree.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                yield path
    yield from sorted(p for p in BENCH.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_tracker_number_in_the_source() -> None:
    found = []
    for path in source_files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if cited(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "say the reason in words instead:\n" + "\n".join(found)


def parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
            ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser of the command line, the top one first, then each command and subcommand."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, (*path, name))


def test_no_tracker_number_in_any_help(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    walked = dict(parsers(build_parser()))
    # the walk reaches the commands and their actions (a walk that stopped at the top would pass)
    assert {("pause",), ("dead-letters", "list"), ("cursor", "reset")} <= set(walked)
    found = {" ".join(path) or "(top)": cited(p.format_help())
             for path, p in walked.items() if cited(p.format_help())}
    assert not found, f"--help cites tracker numbers: {found}"


@pytest.mark.anyio
async def test_no_tracker_number_in_any_metric_description() -> None:
    service = Service(MemoryBackend().stores(), load_config(env={}))
    registry = service.metrics.prom.registry
    registry.register(ServiceCollector(service))  # the per-scrape gauges, as the ops server does
    helps = [line for line in exposition(registry, "text/plain")[1].decode().splitlines()
             if line.startswith("# HELP ")]
    names = {line.split()[2] for line in helps}
    # the recorded counters and the per-scrape gauges are both there
    assert {"board_outbox_paused_rows_total", "board_outbox_rows_held_by_pause"} <= names, names
    found = [line for line in helps if cited(line)]
    assert not found, "metric descriptions cite tracker numbers:\n" + "\n".join(found)
