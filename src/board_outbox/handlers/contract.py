"""What a handler is and what it may do: the ``EffectHandler`` and ``Projection`` protocols and
the ``ExecutionContext`` a handler gets with its row (re-exported by ``registry``)."""

from __future__ import annotations

from typing import Any, Protocol

from ..clock import Clock
from ..domain import EffectRow, EventSnapshot
from ..errors import LeaseLost
from ..ports import Claim, EffectOutbox


class ExecutionContext:
    """What a handler may do besides its effect: fenced writes on its own claimed row."""

    def __init__(self, claim: Claim, outbox: EffectOutbox, clock: Clock) -> None:
        self.claim = claim
        self.outbox = outbox
        self.clock = clock
        # what the handler's ``prepare`` read for the whole claimed batch (None: read per row)
        self.prefetched: Any = None

    @property
    def attempt(self) -> int:
        assert self.claim.row is not None
        return self.claim.row.attempts + 1

    async def mark_consumed(self) -> None:
        """Persist consume_marked (M6). Raises ``LeaseLost`` if our claim was stolen."""
        ok = await self.outbox.mark_consumed(self.claim.ref, self.claim.claim_id, self.clock.now())
        if not ok:
            raise LeaseLost(f"claim {self.claim.claim_id} lost before consume_marked")


class EffectHandler(Protocol):
    async def execute(self, row: EffectRow, ctx: ExecutionContext) -> str:
        """Perform the effect; return an outcome label. Raise ``EffectError`` to retry,
        ``PermanentEffectError`` to dead-letter at once."""
        ...


class Projection(Protocol):
    """A read model fed by ``projection`` rows; applying the same event twice is a no-op."""

    @property
    def name(self) -> str: ...

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str: ...

    async def reset(self, tenant_id: str) -> None: ...
