"""The stuck-row sweep's query: the rows no claim or mark will ever move
(``validation.stuck_reason``), read whole to be parked."""

from __future__ import annotations

from typing import Any

from anyio.lowlevel import checkpoint

from board_outbox.adapters.memory.outbox.rows import OutboxDocs
from board_outbox.model.row_documents import LEASE_HORIZON_SECONDS, stuck_reason


class OutboxSweep(OutboxDocs):
    """``stuck_rows``."""

    async def stuck_rows(
        self, now: float, limit: int, horizon: float = LEASE_HORIZON_SECONDS
    ) -> list[tuple[Any, dict[str, Any]]]:
        await checkpoint()
        return [(ref, dict(d)) for ref, d in self._docs.items()
                if stuck_reason(d, now, horizon) is not None][:limit]
