"""Structured logging: text or JSON lines, with tenant, seq and row key when a record has them.

A record written while a span is current (a drain batch, an execute attempt, a launch) carries
the span's ``trace_id`` and ``span_id`` (C7): a JSON line joins its trace in Jaeger, and a
trace's spans lead to their log lines. The ids are taken when the record is handled, in the
caller's thread and context (``TraceIds``), so a handler that formats later still has them.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import msgspec
from opentelemetry import trace
from opentelemetry.trace import format_span_id, format_trace_id

CONTEXT_FIELDS = ("tenant_id", "seq", "row_key", "sub_id", "launch_id", "replica")
TRACE_FIELDS = ("trace_id", "span_id")


class TraceIds(logging.Filter):
    """Stamps each record with the current span's ids (W3C hex) when there is a valid one; a
    record that already names them (``extra=``) keeps its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid and not hasattr(record, "trace_id"):
            record.trace_id = format_trace_id(ctx.trace_id)
            record.span_id = format_span_id(ctx.span_id)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for f in CONTEXT_FIELDS + TRACE_FIELDS:
            if hasattr(record, f):
                doc[f] = getattr(record, f)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return msgspec.json.encode(doc).decode()


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        ctx = " ".join(f"{f}={getattr(record, f)}" for f in CONTEXT_FIELDS if hasattr(record, f))
        return f"{base} [{ctx}]" if ctx else base


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of the record, not the stream it was
    created with: a CLI run inside a host that swaps stderr (pytest's capture, an embedding
    app) must never log into a stream that has since been closed."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def setup_logging(fmt: str = "text", level: str = "INFO") -> None:
    handler = StderrHandler()
    handler.addFilter(TraceIds())
    handler.setFormatter(
        JsonFormatter() if fmt == "json"
        else TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # httpx logs one INFO line per request: a plugin or a handler using it must not pay for
    # (and flood the log with) a line per call
    for noisy in ("pymongo", "urllib3", "opentelemetry", "httpx", "httpcore", "aiohttp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
