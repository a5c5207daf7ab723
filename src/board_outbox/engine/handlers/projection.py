"""The ``projection`` effect handler: dispatch a projection row to the read model it names."""

from __future__ import annotations

from typing import Any

from board_outbox.engine.handlers.contract import ExecutionContext, Projection
from board_outbox.model.errors import PermanentEffectError, UnknownEffectKind
from board_outbox.model.rows import EffectRow


class ProjectionDispatcher:
    def __init__(self, projections: dict[str, Projection]) -> None:
        self._projections = projections

    async def execute(self, row: EffectRow, ctx: ExecutionContext[Any]) -> str:
        proj = self._projections.get(row.projection or "")
        if proj is None:
            raise UnknownEffectKind(f"no projection named {row.projection!r} is registered")
        if row.event is None:
            raise PermanentEffectError("projection row carries no event")
        return await proj.apply(row.tenant_id, row.event)
