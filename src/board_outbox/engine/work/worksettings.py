"""The worker's settings (``[worker]``), a leaf type in its own module so the worker's parts
and the configuration import it without the worker."""

from __future__ import annotations

import msgspec

from board_outbox.model.backoff import BackoffPolicy
from board_outbox.model.bounds import AtLeastOne, Frac, Pos, PosInt


class WorkerSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The worker's settings; the ``[worker]`` configuration section decodes straight into it."""

    lease_seconds: Pos = 30.0
    max_attempts: PosInt = 8
    batch_size: PosInt = 20
    backoff_base_seconds: Pos = 1.0
    backoff_factor: AtLeastOne = 2.0
    backoff_cap_seconds: Pos = 300.0
    backoff_jitter: Frac = 0.2
    idle_seconds: Pos = 0.25
    # P2: a tick's projection rows of one projection apply as one batch (projection_batch.py)
    projection_batching: bool = True
    # a due row of a tenant this replica does not own is taken once this long has passed since
    # it was materialized (its created_at; S1): a live owner's fresh rows are left to it
    steal_after_seconds: Pos = 1.0
    # the sweep for expired leases across tenants runs at most this often (one query, S2)
    reclaim_every_seconds: Pos = 5.0
    # while the change stream is open, the owned tenants' new rows reach the worker by hand as
    # they are inserted: its due-row pick (one query, S2) is then only the net for the rest
    # (another owner's rows past steal_after_seconds, rows given back by others, a coalescing
    # row's quiet time) and runs this often when idle; the retries and deferrals this worker
    # wrote are picked when due, whatever this says
    net_pick_seconds: Pos = 5.0
    # O4 heartbeat: every lease_seconds * heartbeat_fraction a running effect's lease is extended
    # (fenced by claim_id; 0 turns it off), never past max_execution_seconds after it started:
    # a hung effect then loses its lease and the reclaim counts the attempt (M9)
    heartbeat_fraction: Frac = 0.34
    max_execution_seconds: Pos = 600.0
    # the done marks of rows that finish close together go out as one bulk write: at the end of
    # each claimed batch and, while it runs, every this long (a launch's done mark waits at most
    # this long plus the write)
    mark_flush_seconds: Pos = 0.05
    # lanes running at once, one per tenant (``lanes.py``): a tenant's rows run one after
    # another in their order, different tenants' side by side; the lanes outlive a claimed
    # batch, so a slow launch holds up only its own tenant
    concurrency: PosInt = 8

    @property
    def backoff(self) -> BackoffPolicy:
        return BackoffPolicy(base_seconds=self.backoff_base_seconds, factor=self.backoff_factor,
                             cap_seconds=self.backoff_cap_seconds, jitter=self.backoff_jitter)
