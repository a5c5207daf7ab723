"""The effect handlers, one module each: ``launch`` (re-verify, consume one-shot labels, launch)
and ``projection`` (dispatch to the named read model); what a handler is (``contract``),
coalescing per (subscription, card) (``coalesce``) and the registry by row kind (``registry``).

May import ``telemetry`` and ``flow``; never ``tail``, ``work`` or ``upkeep``."""

from __future__ import annotations

from board_outbox.engine.handlers.launch import LaunchHandler
from board_outbox.engine.handlers.projection import ProjectionDispatcher

__all__ = ["LaunchHandler", "ProjectionDispatcher"]
