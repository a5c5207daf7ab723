"""In-memory ``trigger_effects`` (``MemoryEffectOutbox``, the ``EffectOutbox`` port):
documents stored as plain dicts and decoded on read, exactly like the Mongo adapter, so
malformed rows can be planted and are handled the same way.

One module per concern, each a mixin over the documents (``rows``), named as the Mongo
adapter's modules: the twin of each of its methods is found in the module of the same name
(``claim``, ``marks``, ``reads``, ``gauges``, ``sweep``, ``bursts``)."""

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
    """The outbox in memory: the concerns' mixins over one store of documents."""
