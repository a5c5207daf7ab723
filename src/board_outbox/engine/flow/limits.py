"""Concurrency and rate limits per bot and per tenant (F2): the launch handler's gate.

Before a launch row consumes labels or calls the launcher, ``LaunchGate.hold`` takes an in-flight
slot of its bot and of its tenant (``LimitStore.acquire``, ending ``slot_seconds`` on) and counts
it against the per-second rates (``LimitStore.take``). Over a limit it raises ``OverLimit``: the
worker defers the row (pending again after ``wait_seconds``, attempts unchanged).

A slot lives exactly as long as its launch, however long that runs:

- every beat of the row's lease heartbeat renews it (``LimitStore.renew``: ``slot_seconds`` on
  from the beat, fenced on the holder, so a slot taken over is never renewed back);
- the launch is bounded by the slot's end as last renewed: a launch whose slot ends under it
  (the renewals failed until then, the heartbeat stopped with a lost lease, or another holder
  took the slot over) is cancelled there and fails as ``SlotLost`` (retried), never running on
  beside another launch;
- the slots are given back when the launch ends, whatever its outcome (done, error, cancelled,
  a hard stop), shielded from cancellation; a replica that dies holding one frees it when it
  ends, ``slot_seconds`` after its last renewal.

The store holds the counts, so a limit is global across replicas.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import msgspec

from board_outbox.engine.flow.leases import Rider
from board_outbox.model.bounds import InFlight, PerSecond, Pos
from board_outbox.model.clock import Clock
from board_outbox.model.errors import OverLimit, SlotLost, StoreError, StoreUnavailable
from board_outbox.model.limits import bot_key, rate_slot, tenant_key
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import Subscription
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
    # how far an in-flight slot ends ahead of its last renewal: every beat of the lease
    # heartbeat renews it while its launch runs (so it must outlast a few beats: checked), and
    # a replica that dies mid-launch frees it this long after its last beat
    slot_seconds: Pos = 60.0
    # how often each replica checks that the limits collection still has its indexes (the TTL
    # index above all): a collection dropped while the service runs gets them back
    index_check_seconds: Pos = 60.0

    @property
    def configured(self) -> bool:
        """Is any limit set here (subscriptions may still set their own)?"""
        return bool(self.bot_in_flight or self.bot_per_second or self.tenant_in_flight
                    or self.tenant_per_second)


# a release the store does not answer within this long is left to the slot's end
RELEASE_SECONDS = 10.0


class _Slots:
    """The in-flight slots one launch holds: their keys, their end as last renewed, and the
    cancel scope that bounds the launch by that end."""

    def __init__(self, keys: list[str], holder: str, until: float, scope: anyio.CancelScope) -> None:
        self.keys, self.holder, self.until, self.scope = keys, holder, until, scope
        self.over = False  # the launch has ended: a late beat does nothing
        self.lost = ""  # why the launch was cut ("": it was not)

    def cut(self, why: str) -> None:
        if self.over:
            return
        self.lost = why
        self.scope.cancel()


class LaunchGate:
    def __init__(self, store: LimitStore, settings: LimitSettings) -> None:
        self.store = store
        self.settings = settings

    @asynccontextmanager
    async def hold(self, row: EffectRow, sub: Subscription, holder: str, clock: Clock,
                   riders: list[Rider] | None = None) -> AsyncIterator[None]:
        """Inside: the launch is within every limit, its in-flight slots held by ``holder``,
        renewed by each beat of its lease (a rider added to ``riders`` while inside) and
        bounded by their end. Raises ``OverLimit`` (nothing held) when it is not within a limit,
        ``SlotLost`` when its slots ended under it (the launch cancelled there)."""
        s = self.settings
        in_flight = sub.max_in_flight if sub.max_in_flight is not None else s.bot_in_flight
        per_second = sub.max_per_second if sub.max_per_second is not None else s.bot_per_second
        keys = (("bot", bot_key(row.tenant_id, sub.bot), in_flight, per_second),
                ("tenant", tenant_key(row.tenant_id), s.tenant_in_flight, s.tenant_per_second))
        now = clock.now()
        until = now + s.slot_seconds
        held: list[str] = []
        try:
            for scope, key, n, _rate in keys:
                if n and not await self.store.acquire(key, n, holder, until, now):
                    raise OverLimit(scope, "in_flight", key, s.wait_seconds)
                if n:
                    held.append(key)
            for scope, key, _n, rate in keys:
                if rate and not await self.store.take(key, rate, now):
                    # due again when the full window ends
                    wait = max(s.wait_seconds, rate_slot(key, rate, now)[2] - now)
                    raise OverLimit(scope, "per_second", key, wait)
            if not held:
                yield
                return
            # the launch runs until its slots' end at most, on the event loop's clock
            with anyio.CancelScope(deadline=anyio.current_time() + until - clock.now()) as bound:
                slots = _Slots(held, holder, until, bound)

                async def ride() -> None:
                    await self._renew(slots, clock)

                beats = [] if riders is None else riders
                beats.append(ride)
                try:
                    yield
                finally:
                    slots.over = True
                    beats.remove(ride)
            if bound.cancelled_caught:
                why = slots.lost or "its in-flight slot ended before a renewal"
                raise SlotLost(f"launch of {row.row_key} cut: {why}")
        finally:
            if held:
                await self._release(held, holder)

    async def _renew(self, slots: _Slots, clock: Clock) -> None:
        """One beat: every slot of the launch ends ``slot_seconds`` on from now, and so does
        the launch's bound. A slot no longer ours (taken over after it ended) cuts the launch;
        a store error leaves the slots and the bound where they were (the next beat retries)."""
        if slots.over:
            return
        now = clock.now()
        if now >= slots.until:  # ended before this beat (the bound has cut it, or is about to)
            slots.cut("its in-flight slot ended before a renewal")
            return
        until = now + self.settings.slot_seconds
        for key in slots.keys:
            try:
                kept = await self.store.renew(key, slots.holder, until)
            except (StoreUnavailable, StoreError) as exc:
                log.warning("could not renew the in-flight slot of %s (%s): the launch is cut at "
                            "its end unless a later beat renews it", key, exc)
                return
            if not kept:
                if not slots.over:
                    log.warning("the in-flight slot of %s was taken over: cutting its launch", key)
                slots.cut(f"the in-flight slot of {key} was taken over by another holder")
                return
        slots.until = until
        slots.scope.deadline = anyio.current_time() + until - clock.now()

    async def _release(self, keys: list[str], holder: str) -> None:
        with anyio.move_on_after(RELEASE_SECONDS, shield=True):
            for key in keys:
                try:
                    await self.store.release(key, holder)
                except (StoreUnavailable, StoreError) as exc:  # it ends on its own
                    log.warning("could not release the in-flight slot of %s (%s): free again "
                                "slot_seconds after its last renewal", key, exc)
