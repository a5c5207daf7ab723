"""A timeout that always fires (issue 21): every async test runs inside an anyio deadline a little
shorter than its pytest-timeout, so a test stuck awaiting something that never comes (an idle
event loop: pytest-timeout's ``signal`` method cannot interrupt it) is cancelled and reported as a
timeout naming the test. pytest-timeout's ``thread`` method (pyproject.toml) stays the backstop for
a test that blocks the loop itself.

Loaded by tests/conftest.py (``pytest_plugins``); usable alone: ``pytest -p tests.support.deadline``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Generator
from typing import Any

import anyio
import pytest

# the deadline is this share of the test's timeout, so it fires before the thread backstop
SHARE = 0.9


def _timeout_of(item: pytest.Function) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    value = item.config.getoption("timeout", None)
    if value is None:
        value = item.config.getini("timeout")
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def _with_deadline(fn: Callable[..., Any], seconds: float, nodeid: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def run(*args: Any, **kwargs: Any) -> Any:
        try:
            with anyio.fail_after(seconds):
                return await fn(*args, **kwargs)
        except TimeoutError:
            pytest.fail(f"Timeout: {nodeid} still running after {seconds:g}s (stuck in an await: "
                        "the test's anyio deadline cancelled it)", pytrace=False)

    return run


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, Any, None]:
    seconds = _timeout_of(pyfuncitem) * SHARE
    original = pyfuncitem.obj
    if seconds > 0 and inspect.iscoroutinefunction(original):
        pyfuncitem.obj = _with_deadline(original, seconds, pyfuncitem.nodeid)
    try:
        yield
    finally:
        pyfuncitem.obj = original
