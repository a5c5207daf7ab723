"""Time and randomness, injected so that leases, backoff and gap ageing are tested without sleeping."""

from __future__ import annotations

import random
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (wall clock: leases and not_before are compared across replicas)."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that only moves when told to."""

    def __init__(self, start: float | None = None) -> None:
        # Starts at the real time by default: stores with TTL indexes (Mongo) compare dates
        # against the real clock, so a manual clock years in the past would expire done rows.
        self._now = float(int(time.time())) if start is None else start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def set(self, when: float) -> None:
        self._now = when


class RandomSource(Protocol):
    def random(self) -> float:
        """A float in [0, 1)."""
        ...


def seeded_random(seed: int | None = None) -> RandomSource:
    return random.Random(seed)
