"""One module per command; each command is ``async (args, factory) -> exit code``."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

StoresFactory = Callable[..., AbstractAsyncContextManager[Any]]
Command = Callable[[argparse.Namespace, StoresFactory], Awaitable[int]]


def default_factory(cfg: Any, *, ensure_schema: bool = False) -> AbstractAsyncContextManager[Any]:
    from board_outbox.service.backends import open_backend

    return open_backend(cfg, ensure_schema=ensure_schema)
