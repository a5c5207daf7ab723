"""Counters the runtime keeps for summaries and metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

from board_outbox.engine.tail.drain import DrainResult
from board_outbox.engine.work.outcomes import TickResult


@dataclass
class Stats:
    """Counters the runtime keeps for summaries and metrics."""

    drains: int = 0
    materialized: int = 0
    # events whose cursor this replica moved past (its CAS won): the series' "materialized" --
    # ``materialized`` also counts a batch a racing replica passed first (its rows collapsed)
    events_passed: int = 0
    rows_inserted: int = 0
    skipped_deleted: int = 0
    skipped_poison: int = 0
    stream_wakes: int = 0
    poll_wakes: int = 0
    stream_reopens: int = 0
    stream_events: int = 0  # inserts the change stream delivered, before any filtering here
    stream_rescopes: int = 0  # reopened because the tenants to leave out changed (S5)
    stream_paced: int = 0  # getMores held back until the busy tail's next pass (S6)
    subscription_changes: int = 0  # writes to the subscriptions the stream delivered
    cas_lost: int = 0
    tokens_dropped: int = 0  # stored resume tokens the server refused, dropped (W3)
    worker: TickResult = field(default_factory=TickResult)
    last_drain: list[DrainResult] = field(default_factory=list)
