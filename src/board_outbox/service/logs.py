"""Structured logging: text or JSON lines, with tenant, seq and row key when a record has them."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import msgspec

CONTEXT_FIELDS = ("tenant_id", "seq", "row_key", "sub_id", "launch_id", "replica")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for f in CONTEXT_FIELDS:
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
