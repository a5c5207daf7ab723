"""Projection handlers: read models fed by ``projection`` effect rows.

The built-in projections (``AVAILABLE``) live here, one module each; user projections load by
name (``board_outbox.plugins``). Each projection registers with the handler registry; the tail
writes one ``projection`` row per event per enabled projection.
"""

from __future__ import annotations

from ..ports import ReadModelStore
from ..registry import HandlerRegistry
from .board_reflect import BoardReflect
from .card_activity import CardActivity

AVAILABLE: dict[str, type[BoardReflect] | type[CardActivity]] = {
    BoardReflect.name: BoardReflect, CardActivity.name: CardActivity,
}


def register_all(registry: HandlerRegistry, store: ReadModelStore, names: list[str]) -> None:
    """Register the named projections (built-in names, ``module:Class`` topics, entry points);
    a bad name is a one-line ``ConfigError`` naming the setting."""
    from ..plugins import build_projections

    for proj in build_projections(names, store):
        registry.register_projection(proj)


__all__ = ["AVAILABLE", "BoardReflect", "CardActivity", "register_all"]
