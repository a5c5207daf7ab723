"""Translate pymongo's exceptions into board-outbox's explicit error types.

No raw pymongo exception reaches the tail or the worker: transient failures (network, timeouts,
elections, "not primary", interrupted operations, anything labelled retryable) become
``StoreUnavailable``; everything else becomes ``StoreError``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from pymongo.errors import (
    AutoReconnect,
    ConnectionFailure,
    ExecutionTimeout,
    NetworkTimeout,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
    WaitQueueTimeoutError,
    WTimeoutError,
)

from board_outbox.model.bad_documents import cap
from board_outbox.model.errors import BoardOutboxError, StoreError, StoreUnavailable

# Server error codes that mean "try again": network, step-down, shutdown, time limits, and a
# cursor the server lost under us (a restart or a killOp between a find and its getMore: 43,
# 175, 237) or a write conflict (112): each is gone on the next attempt.
TRANSIENT_CODES = frozenset({
    6, 7, 24, 43, 50, 89, 91, 112, 134, 175, 189, 237, 262, 9001, 10107, 11600, 11601, 11602,
    13435, 13436,
})
HISTORY_LOST_CODES = frozenset({286, 280, 260})  # ChangeStreamHistoryLost, Fatal, InvalidResumeToken


def is_transient(exc: PyMongoError) -> bool:
    if isinstance(exc, (AutoReconnect, ConnectionFailure, NetworkTimeout, ExecutionTimeout,
                        ServerSelectionTimeoutError, WaitQueueTimeoutError, WTimeoutError)):
        return True
    if getattr(exc, "timeout", False):
        return True
    if exc.has_error_label("RetryableWriteError") or exc.has_error_label("TransientTransactionError"):
        return True
    return isinstance(exc, OperationFailure) and exc.code in TRANSIENT_CODES


# what a server selection timeout appends after its reason: the driver's whole topology, and the
# timeouts it was configured with -- a wall of text in a one-line error or a log line
_TOPOLOGY = re.compile(r", Timeout: [0-9.]+s, Topology Description: .*$|"
                       r"\s*\(configured timeouts:[^)]*\)", re.S)


def classify(exc: PyMongoError, op: str) -> BoardOutboxError:
    # capped: the server's message can quote a whole document (33 MB for a 16 MB row)
    text = cap(f"{op}: {type(exc).__name__}: {_TOPOLOGY.sub('', str(exc))}")
    if is_transient(exc):
        return StoreUnavailable(text)
    return StoreError(text)


P = ParamSpec("P")
R = TypeVar("R")


def translated(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Decorate an adapter method: pymongo errors leave it as StoreUnavailable / StoreError."""
    op = fn.__qualname__

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except PyMongoError as exc:
            raise classify(exc, op) from exc

    return wrapper
