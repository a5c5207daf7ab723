"""The effect handlers, one module each: ``launch`` (re-verify, consume one-shot labels, launch)
and ``projection`` (dispatch to the named read model)."""

from __future__ import annotations

from board_outbox.engine.handlers.launch import LaunchHandler
from board_outbox.engine.handlers.projection import ProjectionDispatcher

__all__ = ["LaunchHandler", "ProjectionDispatcher"]
