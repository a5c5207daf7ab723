"""Backpressure (T1): when the store slows down or times out, each replica asks less of it.

One ``Pressure`` per replica, shared by its tail, its worker and its loops. It holds a factor in
``[MIN_FACTOR, 1]`` that scales what the replica asks of the store at once: the tail's batches,
the worker's claims and the hand-off's room, and (divided by it) the poll and idle pauses.

- a store call that fails as unavailable (a timeout, a network error) or a pass that took longer
  than ``slow_seconds`` halves the factor (at most once per ``COOLDOWN_SECONDS``: one outage seen
  by several calls at once is one halving);
- a pass that ran clean grows it back by ``GROW`` for every ``COOLDOWN_SECONDS`` of clean
  running since the last trouble or change: recovery follows time while the store answers, not
  the count of passes -- the stretched pauses make passes rare at a low factor, so a replica
  recovering one step per pass sat near its floor for minutes after the store had recovered.
  From the floor to full takes about ``(1 - MIN_FACTOR) / GROW`` cooldowns of clean answers.
- a stretched pause is at most ``MAX_STRETCHED_SECONDS`` (or the pause itself, if longer): a
  backed-off replica still looks again within that, so the store's recovery is seen there.

So under overload a replica backs off multiplicatively and recovers additively (AIMD): two
replicas on a saturated store shrink until their requests are answered in time, instead of
retrying full-size batches that time out again and pile more work on the store that is
already behind.
"""

from __future__ import annotations

import logging

from board_outbox.model.clock import Clock

__all__ = ["COOLDOWN_SECONDS", "GROW", "MAX_STRETCHED_SECONDS", "MIN_FACTOR", "Pressure"]

log = logging.getLogger("board_outbox.pressure")

MIN_FACTOR = 1 / 16
GROW = 1 / 8
COOLDOWN_SECONDS = 1.0
MAX_STRETCHED_SECONDS = 5.0


class Pressure:
    def __init__(self, clock: Clock, *, slow_seconds: float = 2.0) -> None:
        self.clock = clock
        self.slow_seconds = slow_seconds
        self.factor = 1.0
        self.shrinks = 0  # how many times it backed off (a metric)
        self._last_change = -float("inf")  # the last shrink or growth
        self._last_trouble = -float("inf")  # the last slow pass or failed call

    def scale(self, n: int, floor: int = 1) -> int:
        """``n`` scaled by the factor, never below ``floor``."""
        return max(floor, int(n * self.factor))

    def stretch(self, seconds: float) -> float:
        """A pause stretched by the factor (a backed-off replica polls less often), at most
        ``MAX_STRETCHED_SECONDS`` unless the pause is longer itself."""
        return max(seconds, min(seconds / self.factor, MAX_STRETCHED_SECONDS))

    def failed(self, why: str = "") -> None:
        """A store call failed as unavailable: back off."""
        self._shrink(why or "store unavailable")

    def observe(self, seconds: float) -> None:
        """A pass of store calls took ``seconds``: back off when slow, else recover."""
        if seconds > self.slow_seconds:
            self._shrink(f"a pass took {seconds:.1f}s")
        else:
            self._grow()

    def _shrink(self, why: str) -> None:
        now = self.clock.now()
        self._last_trouble = now  # no recovery is credited for the time up to here
        if now - self._last_change < COOLDOWN_SECONDS or self.factor <= MIN_FACTOR:
            return
        if self.factor >= 1.0:
            log.warning("store under pressure (%s): asking less of it until it recovers", why)
        self.factor = max(MIN_FACTOR, self.factor / 2)
        self.shrinks += 1
        self._last_change = now

    def _grow(self) -> None:
        if self.factor >= 1.0:
            return
        now = self.clock.now()
        clean = now - max(self._last_change, self._last_trouble)
        if clean < COOLDOWN_SECONDS:
            return
        self.factor = min(1.0, self.factor + GROW * clean / COOLDOWN_SECONDS)
        self._last_change = now
        if self.factor >= 1.0:
            log.info("store pressure over: full batches again")
