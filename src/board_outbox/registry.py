"""The registry of effect handlers, keyed by row kind (C2).

``launch`` (the zero value) and ``projection`` are built in; a deployment may register more
kinds. Projections register by name and are dispatched by the ``projection`` handler.
"""

from __future__ import annotations

from typing import Protocol

from .clock import Clock
from .domain import PROJECTION, EffectRow, EventSnapshot
from .errors import LeaseLost, UnknownEffectKind
from .handlers.projection import ProjectionDispatcher
from .ports import Claim, EffectOutbox


class ExecutionContext:
    """What a handler may do besides its effect: fenced writes on its own claimed row."""

    def __init__(self, claim: Claim, outbox: EffectOutbox, clock: Clock) -> None:
        self.claim = claim
        self.outbox = outbox
        self.clock = clock

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


class HandlerRegistry:
    def __init__(self) -> None:
        self._handlers: dict[str, EffectHandler] = {}
        self._projections: dict[str, Projection] = {}
        self._handlers[PROJECTION] = ProjectionDispatcher(self._projections)

    def register(self, kind: str, handler: EffectHandler, *, replace: bool = False) -> None:
        if not kind:
            raise ValueError("effect kind must be a non-empty string")
        if kind in self._handlers and not replace and kind != PROJECTION:
            raise ValueError(f"a handler for kind {kind!r} is already registered")
        self._handlers[kind] = handler

    def register_projection(self, projection: Projection) -> None:
        if projection.name in self._projections:
            raise ValueError(f"projection {projection.name!r} is already registered")
        self._projections[projection.name] = projection

    def handler(self, kind: str) -> EffectHandler:
        try:
            return self._handlers[kind]
        except KeyError:
            raise UnknownEffectKind(f"no effect handler registered for kind {kind!r}") from None

    def projection(self, name: str) -> Projection:
        try:
            return self._projections[name]
        except KeyError:
            raise UnknownEffectKind(f"no projection named {name!r} is registered") from None

    @property
    def kinds(self) -> list[str]:
        return sorted(self._handlers)

    @property
    def projections(self) -> list[str]:
        return sorted(self._projections)
