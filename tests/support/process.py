"""``board-outbox run`` as a child process, for the tests that watch the service end to end."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def running(cfg: Path, log: Path, env: Mapping[str, str],
            cwd: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m board_outbox run --config cfg``, its stderr in ``log`` (a file: a pipe nobody
    reads would fill up and freeze it); killed on the way out if it is still running."""
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "board_outbox", "run", "--config", str(cfg)],
                                env=dict(env), stdout=subprocess.DEVNULL, stderr=err, cwd=cwd)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def stop_gracefully(proc: subprocess.Popen[bytes], log: Path) -> None:
    """The service is still running; SIGTERM ends it with exit status 0 within 30 s."""
    assert proc.poll() is None, log.read_text()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, log.read_text()
