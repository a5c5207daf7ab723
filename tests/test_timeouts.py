"""The suite's timeout always fires (issue 21): a test stuck in an idle event loop, or blocking
the loop, is stopped within its limit and reported as a timeout naming the test."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

HUNG = '''
import time
import anyio
import pytest

@pytest.fixture
def anyio_backend():
    return "asyncio"

@pytest.mark.anyio
async def test_waits_for_an_event_nobody_sets():
    await anyio.Event().wait()

@pytest.mark.anyio
async def test_readiness_that_never_answers():
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.sleep_forever)

@pytest.mark.anyio
async def test_quick():
    await anyio.sleep(0)
'''

BLOCKING = '''
import time
import pytest

@pytest.fixture
def anyio_backend():
    return "asyncio"

@pytest.mark.anyio
async def test_blocks_the_loop():
    time.sleep(600)
'''


def run_pytest(tmp_path: Path, body: str, timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    test = tmp_path / "test_hung_example.py"
    test.write_text(body)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.deadline", "-p", "no:cacheprovider",
         "-q", f"--timeout={timeout}", "-o", "timeout_method=thread", str(test)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - t0


def test_a_test_stuck_in_an_idle_event_loop_is_a_named_timeout(tmp_path: Path) -> None:
    proc, took = run_pytest(tmp_path, HUNG, 3)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "2 failed, 1 passed" in out, out
    for name in ("test_waits_for_an_event_nobody_sets", "test_readiness_that_never_answers"):
        # the file's node id is relative to the rootdir, or a path when outside it (a copy of
        # the repository under the temp dir, as the mutation campaign runs it)
        assert re.search(rf"Timeout: (\S*/)?test_hung_example\.py::{name} still running after "
                         r"2\.7s", out), out
    assert took < 60, took  # both stopped near their 3 s limit, not left hanging


def test_a_test_that_blocks_the_loop_is_stopped_by_the_thread_backstop(tmp_path: Path) -> None:
    proc, took = run_pytest(tmp_path, BLOCKING, 2)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Timeout" in out and "test_blocks_the_loop" in out, out
    assert took < 60, took


@pytest.mark.anyio
async def test_the_deadline_wraps_this_very_test(request: pytest.FixtureRequest) -> None:
    """The wrapper is installed on the suite's own async tests, not only in the examples."""
    assert getattr(request.function, "__wrapped__", None) is not None
