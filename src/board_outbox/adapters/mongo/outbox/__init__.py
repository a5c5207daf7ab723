

"""``trigger_effects``: the durable effect outbox on MongoDB.

- insert: one unordered ``insert_many``; a duplicate ``row_key`` means the row exists. The
  tail's rows for its own worker are born claimed (no claim statement, no pick for them);
- claim: due pending rows of every tenant are claimed as a batch (one pick, one
  ``update_many`` minting a ``claim_id`` and a lease, read back only after a lost race); expired
  leases are reclaimed the same way (one query, one ``update_many``), ``attempts`` +1;
- every mark applies a ``model/transitions`` transition filtered on ``{_id, state: claimed,
  claim_id}``: a stolen lease makes it a no-op; a batch of marks is one ``bulk_write``.

Every hot query is served by a partial index that holds only the rows in one state (``schema``:
pending by ``not_before``, claimed by ``lease_until``, failed by ``updated_at``, done by
``done_at``): its bounds cover the rows in that state, never the whole history.

Every statement that names rows (a claim, a reclaim, a lease beat, a batch of marks, the read
back after any of them, the release of held rows) names them by ``_id`` (``by_ids``), at most
``ROW_CHUNK`` a statement, one round trip each: it is served by the ``_id`` index on every planner
(hinted to it where the server takes hints on writes; the ``_id`` clause first for a planner that
serves the first clause it can; a read by ``_id`` alone, the rest checked here, since a planner
may walk a hinted index whole), and its server time stays well inside the op timeout however
many rows a replica holds.
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
    """The outbox on MongoDB: each concern's statements in its own module."""
