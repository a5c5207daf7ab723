"""The registry of effect handlers, keyed by row kind (C2).

``launch`` (the zero value) and ``projection`` are built in; a deployment registers more kinds
(``[handlers]`` or the ``board_outbox.handlers`` entry points). Projections register by name and
are dispatched by the ``projection`` handler. The optional hooks are found once, here, by their
named protocols (``PreparingHandler``, ``BatchProjection``), never probed per call.
"""

from __future__ import annotations

from board_outbox.engine.handlers.contract import (
    BatchProjection,
    EffectHandler,
    ExecutionContext,
    PreparingHandler,
    Projection,
)
from board_outbox.engine.handlers.projection import ProjectionDispatcher
from board_outbox.model.errors import UnknownEffectKind
from board_outbox.model.ids import PROJECTION

__all__ = ["EffectHandler", "ExecutionContext", "HandlerRegistry", "Projection"]


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

    def preparing(self, kind: str) -> PreparingHandler | None:
        """The kind's handler if it has a batch read (``prepare``), else None."""
        handler = self._handlers.get(kind)
        return handler if isinstance(handler, PreparingHandler) else None

    def projection(self, name: str) -> Projection:
        try:
            return self._projections[name]
        except KeyError:
            raise UnknownEffectKind(f"no projection named {name!r} is registered") from None

    def batch_projection(self, name: str) -> BatchProjection | None:
        """The named projection if it applies batches (``apply_many``), else None."""
        proj = self.projection(name)
        return proj if isinstance(proj, BatchProjection) else None

    @property
    def kinds(self) -> list[str]:
        return sorted(self._handlers)

    @property
    def projections(self) -> list[str]:
        return sorted(self._projections)
