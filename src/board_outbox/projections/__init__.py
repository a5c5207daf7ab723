"""Projection handlers: read models fed by ``projection`` effect rows.

Each projection registers with the handler registry (``register_all``); the tail writes one
``projection`` row per event per enabled projection.
"""

from __future__ import annotations

from ..ports import ReadModelStore
from ..registry import HandlerRegistry
from .board_reflect import BoardReflect

AVAILABLE = {BoardReflect.name: BoardReflect}


def register_all(registry: HandlerRegistry, store: ReadModelStore, names: list[str]) -> None:
    """Register the named projections; an unknown name is a clear ``ValueError``."""
    for name in names:
        cls = AVAILABLE.get(name)
        if cls is None:
            known = ", ".join(sorted(AVAILABLE))
            raise ValueError(f"unknown projection {name!r} (known: {known})")
        registry.register_projection(cls(store))


__all__ = ["AVAILABLE", "BoardReflect", "register_all"]
