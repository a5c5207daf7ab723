"""The launcher: what starts a bot."""

from __future__ import annotations

from typing import Protocol

from board_outbox.model.records import LaunchRequest

__all__ = ["Launcher"]


class Launcher(Protocol):
    async def launch(self, req: LaunchRequest) -> str:
        """Start the bot; return a launch id. Raises ``LaunchFailed`` (retried)."""
        ...
