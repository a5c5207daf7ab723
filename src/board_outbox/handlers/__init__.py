"""The effect handlers, one module each: ``launch`` (re-verify, consume one-shot labels, launch)
and ``projection`` (dispatch to the named read model)."""

from __future__ import annotations

from .launch import LaunchHandler
from .projection import ProjectionDispatcher

__all__ = ["LaunchHandler", "ProjectionDispatcher"]
