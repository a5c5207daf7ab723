"""The operator port's failed ``accept()`` reports (``quiet_accept_errors``): asyncio reports
every failed accept as fast as its loop spins while descriptors are exhausted; the service
reports one line per ``ACCEPT_REPORT_EVERY`` seconds, counting the failures it did not report."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from board_outbox.surface.http import server
from board_outbox.surface.http.server import ACCEPT_REPORT_EVERY, quiet_accept_errors

pytestmark = pytest.mark.anyio


async def test_failed_accepts_are_reported_once_per_window_with_a_count(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    # the module's own ``time`` replaced (not the time module: the event loop reads that one)
    monkeypatch.setattr(server, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    loop = asyncio.get_running_loop()
    caplog.set_level(logging.ERROR, logger="board_outbox")

    def failed_accept() -> None:
        loop.call_exception_handler({
            "message": "socket.accept() out of system resource",
            "exception": OSError(24, "Too many open files")})

    def reports() -> list[str]:
        return [r.getMessage() for r in caplog.records
                if "operator port: cannot accept connections" in r.getMessage()]

    async with quiet_accept_errors():
        for _ in range(50):  # a burst within one window: one line
            failed_accept()
            clock[0] += 0.01
        assert len(reports()) == 1
        assert "(0 more since the last report)" in reports()[0]
        clock[0] = 1000.0 + ACCEPT_REPORT_EVERY - 0.5  # still the same window
        failed_accept()
        assert len(reports()) == 1
        clock[0] = 1000.0 + ACCEPT_REPORT_EVERY  # the next window: one line, counting the rest
        failed_accept()
        assert len(reports()) == 2
        assert "(50 more since the last report)" in reports()[1]
        clock[0] += ACCEPT_REPORT_EVERY  # a third window: counted from the last report only
        failed_accept()
        assert len(reports()) == 3 and "(0 more since the last report)" in reports()[2]
        clock[0] += 1000  # long after: no pending retry to wait for on the way out
