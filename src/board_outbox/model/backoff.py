"""Exponential backoff with jitter, capped (M5)."""

from __future__ import annotations

import msgspec

from board_outbox.model.clock import RandomSource


class BackoffPolicy(msgspec.Struct, frozen=True, kw_only=True):
    base_seconds: float = 1.0
    factor: float = 2.0
    cap_seconds: float = 300.0
    jitter: float = 0.2  # +/- this fraction, uniformly

    def delay(self, attempt: int, rng: RandomSource) -> float:
        """Delay before the retry that follows failed attempt number ``attempt`` (1-based)."""
        raw = min(self.cap_seconds, self.base_seconds * self.factor ** max(0, attempt - 1))
        spread = 1.0 - self.jitter + 2.0 * self.jitter * rng.random()
        return min(self.cap_seconds, raw * spread)
