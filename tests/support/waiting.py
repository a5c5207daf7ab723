"""Waiting for a condition in tests that drive a real process (``board-outbox run``, a browser)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(pred: Callable[[], Any], timeout: float, what: str | Callable[[], str],
               poll: float = 0.1) -> Any:
    """``pred()``'s first truthy value, polled every ``poll`` seconds; past ``timeout`` an
    ``AssertionError`` saying what did not happen (``what`` may be a callable, evaluated then,
    e.g. to include the process's log)."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what() if callable(what) else what}")
        time.sleep(poll)
