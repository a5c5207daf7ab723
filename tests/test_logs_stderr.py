"""The CLI's log handler follows ``sys.stderr`` (a host may swap it, as pytest's capture does)
instead of keeping the stream it was created with, which may since have been closed."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from board_outbox.service.logs import setup_logging


def test_logs_go_to_the_current_stderr_not_a_closed_one(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    first, second = io.StringIO(), io.StringIO()
    try:
        monkeypatch.setattr(sys, "stderr", first)
        setup_logging("text", "INFO")
        logging.getLogger("bo_logs_test").warning("one")
        first.close()  # the host closes the stream it had handed out
        monkeypatch.setattr(sys, "stderr", second)
        logging.getLogger("bo_logs_test").warning("two")
        out = second.getvalue()
        assert "two" in out and "Logging error" not in out
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
