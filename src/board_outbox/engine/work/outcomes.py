"""What became of a claimed row (``Outcome``) and a tick's tally of them (``TickResult``): plain
values shared by the worker, the batch unit and the completer."""

from __future__ import annotations

from typing import Literal

import msgspec

# What became of one claimed row: the worker applies it to its tally (a ``TickResult`` field).
# "staged": the effect happened and its done mark waits for the completer's next flush, which
# then tells what became of it ("done", "lease_lost" or "unrecorded").
Outcome = Literal["done", "retried", "failed", "skipped_expired", "lease_lost", "unrecorded",
                  "deferred", "held", "staged", "coalesced"]


class TickResult(msgspec.Struct, kw_only=True):
    claimed: int = 0
    done: int = 0
    retried: int = 0
    failed: int = 0
    skipped_expired: int = 0
    lease_lost: int = 0
    released: int = 0
    unrecorded: int = 0  # an outcome the store could not take: the row runs again after its lease
    deferred: int = 0  # over a concurrency or rate limit (F2): pending again, attempts unchanged
    held: int = 0  # its tenant, subscription or bot is paused (F3): held, attempts unchanged
    coalesced: int = 0  # superseded by a newer row of its (subscription, card): coalesced

    def count(self, outcome: Outcome) -> None:
        if outcome != "staged":  # counted when its flush tells what became of it
            setattr(self, outcome, getattr(self, outcome) + 1)

    def add(self, other: TickResult) -> None:
        for f in self.__struct_fields__:
            setattr(self, f, getattr(self, f) + getattr(other, f))
