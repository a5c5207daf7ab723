"""Hostile plugins for the deadline and event-loop tests (issue 20 item 4): a handler that never
returns, one that blocks the event loop, and a projection whose apply never returns. Each imports
only the public SDK, as a user's would."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, ClassVar

import anyio

from board_outbox.sdk import EffectRow, EventSnapshot, ExecutionContext, HandlerContext, ReadModelStore

HANG = "tests.support.hung_plugins:Hang"
BLOCK = "tests.support.hung_plugins:Block"
HANGING_PROJECTION = "tests.support.hung_plugins:HangingProjection"
BLOCK_SECONDS = 1.5


class Hang:
    """An effect that waits forever for an answer that never comes."""

    def __init__(self, ctx: HandlerContext) -> None:
        self.ctx = ctx

    async def execute(self, row: EffectRow, ctx: ExecutionContext[Any]) -> str:
        await anyio.sleep_forever()
        return "unreachable"


class Block:
    """An effect that blocks the event loop (a synchronous call in async code)."""

    def __init__(self, ctx: HandlerContext) -> None:
        self.ctx = ctx

    async def execute(self, row: EffectRow, ctx: ExecutionContext[Any]) -> str:
        time.sleep(BLOCK_SECONDS)
        return "blocked"


class HangingProjection:
    name: ClassVar[str] = "hanging"

    def __init__(self, store: ReadModelStore) -> None:
        self.store = store

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        await anyio.sleep_forever()
        return "unreachable"

    async def apply_many(self, tenant_id: str, events: Sequence[EventSnapshot]) -> list[str]:
        await anyio.sleep_forever()
        return []

    async def reset(self, tenant_id: str) -> None:
        return None
