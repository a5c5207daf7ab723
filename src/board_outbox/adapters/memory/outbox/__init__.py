

"""In-memory ``trigger_effects``: documents stored as plain dicts and decoded on read, exactly
like the Mongo adapter, so malformed rows can be planted and are handled the same way."""

from __future__ import annotations

from board_outbox.adapters.memory.outbox.bursts import OutboxBursts
from board_outbox.adapters.memory.outbox.claim import OutboxClaims
from board_outbox.adapters.memory.outbox.gauges import OutboxGauges
from board_outbox.adapters.memory.outbox.marks import OutboxMarks
from board_outbox.adapters.memory.outbox.reads import OutboxReads
from board_outbox.adapters.memory.outbox.sweep import OutboxSweep

__all__ = ["MemoryEffectOutbox"]


class MemoryEffectOutbox(OutboxClaims, OutboxMarks, OutboxReads, OutboxGauges,
                         OutboxSweep, OutboxBursts):
    """The outbox in memory: each concern in its own module."""
