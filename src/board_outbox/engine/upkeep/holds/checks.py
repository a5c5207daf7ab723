"""The hold checks in the order ``explain`` runs them: a new reason to wait is one more entry."""

from __future__ import annotations

from board_outbox.engine.upkeep.holds.case import HoldCheck
from board_outbox.engine.upkeep.holds.claiming import ownership, turn
from board_outbox.engine.upkeep.holds.coalescing import coalesced, coalescing
from board_outbox.engine.upkeep.holds.limits import limits
from board_outbox.engine.upkeep.holds.pauses import paused
from board_outbox.engine.upkeep.holds.state import backoff, dead_lettered, done, lease

CHECKS: tuple[HoldCheck, ...] = (
    done,
    coalesced,
    dead_lettered,
    lease,
    paused,  # before the limits: a paused row tries none
    limits,
    backoff,
    coalescing,
    ownership,
    turn,
)
