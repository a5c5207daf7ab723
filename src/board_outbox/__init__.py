"""board-outbox: a durable effect outbox for board events (ADR-094)."""

from board_outbox.__about__ import __version__

__all__ = ["__version__"]
