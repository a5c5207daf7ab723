"""The registry of effect handlers, keyed by row kind (C2).

``launch`` (the zero value) and ``projection`` are built in; a deployment may register more
kinds. Projections register by name and are dispatched by the ``projection`` handler.
"""

from __future__ import annotations

from .domain import PROJECTION
from .errors import UnknownEffectKind
from .handlers.contract import EffectHandler, ExecutionContext, Projection
from .handlers.projection import ProjectionDispatcher

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
