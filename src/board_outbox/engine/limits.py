"""Concurrency and rate limits per bot and per tenant (F2): the launch handler's gate.

Before a launch row consumes labels or calls the launcher, ``LaunchGate.hold`` takes an in-flight
slot of its bot and of its tenant (``LimitStore.acquire``, a lease of ``slot_seconds``) and counts
it against the per-second rates (``LimitStore.take``). Over a limit it raises ``OverLimit``: the
worker defers the row (pending again after ``wait_seconds``, attempts unchanged). The slots are
given back when the launch ends, shielded from cancellation; a replica that dies holding one
frees it when its lease ends. The store holds the counts, so a limit is global across replicas.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import msgspec

from board_outbox.model.bounds import InFlight, PerSecond, Pos
from board_outbox.model.clock import Clock
from board_outbox.model.domain import EffectRow, Subscription
from board_outbox.model.errors import OverLimit, StoreError, StoreUnavailable
from board_outbox.model.limits import bot_key, rate_slot, tenant_key
from board_outbox.ports import LimitStore

__all__ = ["LaunchGate", "LimitSettings"]

log = logging.getLogger("board_outbox.limits")


class LimitSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[limits]`` section (F2). 0 means no limit. A subscription's ``max_in_flight`` /
    ``max_per_second`` replace the bot limits for its launches."""

    bot_in_flight: InFlight = 0
    bot_per_second: PerSecond = 0.0
    tenant_in_flight: InFlight = 0
    tenant_per_second: PerSecond = 0.0
    # how long a row over a limit waits before it is due again
    wait_seconds: Pos = 0.25
    # the lease of a taken in-flight slot: a replica that dies mid-launch frees it after this
    # long (a launch must end sooner: launcher.timeout_seconds is checked against it)
    slot_seconds: Pos = 60.0

    @property
    def configured(self) -> bool:
        """Is any limit set here (subscriptions may still set their own)?"""
        return bool(self.bot_in_flight or self.bot_per_second or self.tenant_in_flight
                    or self.tenant_per_second)


class LaunchGate:
    def __init__(self, store: LimitStore, settings: LimitSettings) -> None:
        self.store = store
        self.settings = settings

    @asynccontextmanager
    async def hold(self, row: EffectRow, sub: Subscription, holder: str,
                   clock: Clock) -> AsyncIterator[None]:
        """Inside: the launch is within every limit, its in-flight slots held by ``holder``.
        Raises ``OverLimit`` (nothing held) when it is not."""
        s = self.settings
        in_flight = sub.max_in_flight if sub.max_in_flight is not None else s.bot_in_flight
        per_second = sub.max_per_second if sub.max_per_second is not None else s.bot_per_second
        keys = (("bot", bot_key(row.tenant_id, sub.bot), in_flight, per_second),
                ("tenant", tenant_key(row.tenant_id), s.tenant_in_flight, s.tenant_per_second))
        now = clock.now()
        held: list[str] = []
        try:
            for scope, key, n, _rate in keys:
                if n and not await self.store.acquire(key, n, holder, now + s.slot_seconds, now):
                    raise OverLimit(scope, "in_flight", key, s.wait_seconds)
                if n:
                    held.append(key)
            for scope, key, _n, rate in keys:
                if rate and not await self.store.take(key, rate, now):
                    # due again when the full window ends
                    wait = max(s.wait_seconds, rate_slot(key, rate, now)[2] - now)
                    raise OverLimit(scope, "per_second", key, wait)
            yield
        finally:
            if held:
                await self._release(held, holder)

    async def _release(self, keys: list[str], holder: str) -> None:
        with anyio.CancelScope(shield=True):
            for key in keys:
                try:
                    await self.store.release(key, holder)
                except (StoreUnavailable, StoreError) as exc:  # its lease frees it
                    log.warning("could not release the in-flight slot of %s (%s): free again "
                                "after slot_seconds", key, exc)
