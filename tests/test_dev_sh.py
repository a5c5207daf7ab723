"""The README's test command runs what CI runs (issue 32 item 4): ``./dev.sh test`` installs the
browser tests' chromium when it can (root with apt-get, as CI), else says in one line how; every
skip summary names the skip's own reason; the header says where the demo runs."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import pytest_terminal_summary, skip_reasons

ROOT = Path(__file__).resolve().parent.parent
DEV_SH = ROOT / "dev.sh"


def _browser(tmp_path: Path, *, uid: int, apt: bool) -> subprocess.CompletedProcess[str]:
    """Run dev.sh's ``browser`` step alone, on a PATH where chromium is missing, ``id -u`` says
    ``uid`` and ``apt-get`` (when ``apt``) only records how it was called."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    if apt:
        (stubs / "apt-get").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/apt.log\n')
    for tool in ("sh", "cat", "sed"):
        real = subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True,
                              text=True).stdout.strip()
        (stubs / tool).symlink_to(real)
    for f in stubs.iterdir():
        f.chmod(0o755)
    text = DEV_SH.read_text()
    fn = re.search(r"^browser\(\) \{\n.*?^\}\n", text, re.S | re.M)
    assert fn is not None, "dev.sh has no browser() step"
    script = tmp_path / "fn.sh"
    script.write_text(fn.group(0) + "browser\n")
    env = {k: v for k, v in os.environ.items() if k != "BOARD_OUTBOX_NO_BROWSER"}
    env["PATH"] = str(stubs)
    bash = subprocess.run(["bash", "-c", "command -v bash"], capture_output=True,
                          text=True).stdout.strip()
    return subprocess.run([bash, str(script)], capture_output=True, text=True, env=env,
                          timeout=30)


def test_dev_sh_test_installs_chromium_as_root_with_apt(tmp_path: Path) -> None:
    got = _browser(tmp_path, uid=0, apt=True)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "apt.log").read_text().splitlines()[-1].split()[-2:] == [
        "chromium", "chromium-driver"]
    assert "dev.sh test" in DEV_SH.read_text() and "browser\n" in DEV_SH.read_text().split(
        "  test)", 1)[1].split(";;", 1)[0]  # the test job runs the step


@pytest.mark.parametrize(("uid", "apt"), [(1000, True), (0, False)])
def test_dev_sh_test_says_in_one_line_how_to_install_chromium(
        tmp_path: Path, uid: int, apt: bool) -> None:
    got = _browser(tmp_path, uid=uid, apt=apt)
    assert got.returncode == 0
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and "apt-get install chromium chromium-driver" in lines[0], lines
    assert not (tmp_path / "apt.log").exists()


def test_ci_runs_the_readme_command_and_installs_nothing_itself() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./dev.sh test" in ci and "apt-get install" not in ci


def test_the_dev_sh_header_says_the_demo_runs_on_a_wire_server() -> None:
    header = DEV_SH.read_text().split("set -euo", 1)[0]
    demo = next(line for line in header.splitlines() if "./dev.sh demo" in line)
    assert "in-memory" not in demo and "wire server" in demo


def _skipped(nodeid: str, reason: str, live: bool) -> pytest.TestReport:
    keywords: dict[str, int] = {"live_mongo": 1} if live else {}
    return pytest.TestReport(nodeid, (nodeid, 1, nodeid), keywords, "skipped",
                             (nodeid, 1, f"Skipped: {reason}"), "setup")


class _Reporter:
    def __init__(self, skipped: list[pytest.TestReport]) -> None:
        self.stats = {"skipped": skipped}
        self.lines: list[str] = []

    def write_line(self, line: str, **markup: bool) -> None:
        self.lines.append(line)


def test_every_skip_summary_names_its_real_cause() -> None:
    """A live-marked browser test that skips for want of chromium is not "no MongoDB-wire
    server"; each distinct reason is counted under its own words."""
    chromium = "headless Chromium is not installed (Debian: apt-get install chromium)"
    no_wire = "no MongoDB-wire server (set MONGODB_URI)"
    reports = [_skipped("tests/a.py::browser", chromium, live=True),
               _skipped("tests/b.py::one", no_wire, live=True),
               _skipped("tests/b.py::two", no_wire, live=True),
               _skipped("tests/c.py::plain", "not on this platform", live=False)]
    assert skip_reasons(reports) == {chromium: 1, no_wire: 2, "not on this platform": 1}
    rep = _Reporter(reports)
    pytest_terminal_summary(rep)  # type: ignore[arg-type]
    assert sorted(rep.lines) == sorted([f"1 skipped: {chromium}", f"2 skipped: {no_wire}",
                                        "1 skipped: not on this platform"])
