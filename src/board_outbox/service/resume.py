"""Where the change stream has reached and what is saved of it (S4).

The resume token moves with every change the stream delivers; it is saved at most every
``every_seconds`` and always on the way out, never once per event: a saved token that lags a
little only means that, after a restart, some inserts wake their tenant twice. A token that only
moved with quiet batches (post-batch tokens, nothing delivered) is saved at most every
``QUIET_SAVE_SECONDS``: it keeps the saved position inside the server's history (A2) and costs an
idle replica a write a minute, not one every few seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from board_outbox.ports import ResumeTokenStore

__all__ = ["QUIET_SAVE_SECONDS", "ResumePoint"]

QUIET_SAVE_SECONDS = 60.0


class ResumePoint:
    """The stream's position (``token``), the last position saved (``saved``) and the throttle
    between the two. ``now`` is a monotonic clock in seconds (injected: the simulation runs it on
    its manual clock)."""

    def __init__(self, store: ResumeTokenStore | None, every_seconds: float,
                 now: Callable[[], float]) -> None:
        self.store = store
        self.every = every_seconds
        self.now = now
        self.token: Any | None = None
        self.saved: Any | None = None
        self.last_save = -float("inf")
        self.saves = 0  # tokens written (what /metrics and the tests count)
        self.moved = False  # a change was delivered since the last save (not only quiet batches)

    async def load(self) -> Any | None:
        """The token to open the stream from: the one reached, else (first open) the stored one."""
        if self.store is not None and self.token is None and self.saved is None:
            self.token = self.saved = await self.store.load()
        return self.token

    def reached(self, token: Any | None, *, quiet: bool = False) -> None:
        """The stream delivered up to ``token`` (None: a change without a position); ``quiet``:
        only a quiet batch's post-batch token, no change delivered."""
        if token is not None:
            self.token = token
            self.moved = self.moved or not quiet

    async def save(self, force: bool = False) -> bool:
        """Save the token reached, unless it is saved already or (``force`` off) the last save
        is younger than ``every_seconds`` (``QUIET_SAVE_SECONDS`` when only quiet batches moved
        it). True if it wrote."""
        now = self.now()
        every = self.every if self.moved else max(self.every, QUIET_SAVE_SECONDS)
        if self.store is None or self.token is None or self.token == self.saved or (
                not force and now - self.last_save < every):
            return False
        await self.store.save(self.token)
        self.saved, self.last_save = self.token, now
        self.saves += 1
        self.moved = False
        return True

    def forget(self) -> None:
        """Drop the position (a lost or refused stream): the next open starts at "now"."""
        self.token = self.saved = None

    async def clear(self) -> None:
        """Drop the stored token too (the caller logs a failure: the position is dropped here
        whatever the store says)."""
        self.forget()
        if self.store is not None:
            await self.store.clear()
