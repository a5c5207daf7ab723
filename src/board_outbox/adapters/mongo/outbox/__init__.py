"""``trigger_effects``: the durable effect outbox on MongoDB (``MongoEffectOutbox``, the
``EffectOutbox`` port), one module per concern, each a mixin over the collection:

- ``claim``: rows in and claimed. An insert is one unordered ``insert_many``; a duplicate
  ``row_key`` means the row exists. The tail's rows for its own worker are born claimed (no
  claim statement, no pick for them). Due pending rows of every tenant are claimed as a batch
  (one pick, one ``update_many`` minting a ``claim_id`` and a lease, read back only after a lost
  race); expired leases are reclaimed the same way (one query, one ``update_many``),
  ``attempts`` +1;
- ``marks``: every mark applies a ``model/transitions`` transition filtered on ``{_id, state:
  claimed, claim_id}``: a stolen lease makes it a no-op; a batch of marks is one
  ``bulk_write``. The writes outside a claim too: a dead letter retried, the operators' bulk
  actions (each fenced on the row's state and time), held rows released, dead letters purged;
- ``reads``: rows by key, filter, search and walk (the dead letters, the bulk actions' pages),
  and the identities the audit and the replays read;
- ``gauges``: counts and ages for metrics, health and explain;
- ``sweep``: the stuck-row sweep's queries (rows no claim or mark would ever move);
- ``bursts``: the reads and writes of a card's burst of coalescing rows;
- ``statements``: what they share (the filter of each state, rows named by ``_id``, a
  transition as an update document).

Every hot query is served by a partial index that holds only the rows in one state (``schema``:
pending by ``not_before``, claimed by ``lease_until``, failed by ``updated_at``, done by
``done_at``): its bounds cover the rows in that state, never the whole history.
"""

from __future__ import annotations

from board_outbox.adapters.mongo.outbox.bursts import OutboxBursts
from board_outbox.adapters.mongo.outbox.claim import OutboxClaims
from board_outbox.adapters.mongo.outbox.gauges import OutboxGauges
from board_outbox.adapters.mongo.outbox.marks import OutboxMarks
from board_outbox.adapters.mongo.outbox.reads import OutboxReads
from board_outbox.adapters.mongo.outbox.sweep import OutboxSweep

__all__ = ["MongoEffectOutbox"]


class MongoEffectOutbox(OutboxClaims, OutboxMarks, OutboxReads, OutboxGauges,
                        OutboxSweep, OutboxBursts):
    """The outbox on MongoDB: the concerns' mixins over one collection."""
