"""The operator's web console: server-rendered pages over the store, read-only unless
``[ui] admin_token`` is set. ``run`` mounts it at ``/ui`` on the operator port when ``[ui]
enabled``; ``board-outbox console`` serves it alone."""

from __future__ import annotations

from board_outbox.surface.console.app import build_console

__all__ = ["build_console"]
