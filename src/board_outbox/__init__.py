"""board-outbox: a durable effect outbox for board events (ADR-094)."""

__version__ = "0.1.0"
