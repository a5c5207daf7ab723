"""Pauses (F3): the gate a row passes before it runs, and the pause set behind it.

Every replica reads the pause documents once per heartbeat, in the heartbeat's own read of the
members (``MembershipStore.heartbeat_with_pauses``, then ``adopt``: no round trip of their own,
S6), or, without a membership, in one small read of their own (``refresh``, the service's pause
loop), and checks every claimed row against what it read, in memory: ``check`` (the worker,
right before a row's handler: its tenant or its subscription) and ``check_bot`` (the launch
handler, where the limits gate is: the launch's bot, which only the subscription names). A row
that is paused raises ``Paused``, which the worker turns into the ``defer`` transition: held,
attempts unchanged (``Completer.defer``).

A held row stays held: its ``not_before`` is set aside (``model/pause.HELD_OFFSET``), so no
claim picks it again while the pause lasts (no churn: one write per row per pause). When a
pause is lifted, ``refresh`` releases the rows it holds (``EffectOutbox.release_held``: due
again at their own time, in their order): on the refresh that finds it gone and on the next one
(a hold decided just before the refresh may land just after it), and, as a net for a replica
that died holding rows of a pause lifted meanwhile, every ``RELEASE_SWEEP_SECONDS``. Projection
rows are never held: a pause holds what the tenant's subscriptions do, not the board's own read
models.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping

from board_outbox.model.bad_documents import OnceLog
from board_outbox.model.clock import Clock
from board_outbox.model.errors import Paused, StoreError, StoreUnavailable
from board_outbox.model.pause import SCOPES, Pause
from board_outbox.model.rows import EffectRow
from board_outbox.ports import EffectOutbox, PauseStore

__all__ = ["RELEASE_SWEEP_SECONDS", "PauseGate"]

log = logging.getLogger("board_outbox.pause")

# how often a replica releases the held rows of every pause that is no longer on, whether or
# not it saw that pause lifted (the net under a replica that died holding rows)
RELEASE_SWEEP_SECONDS = 60.0
# refreshes that release the rows of a pause after it is found lifted
RELEASE_PASSES = 2


class PauseGate:
    """One replica's view of the pauses. ``every``: the heartbeat; ``refresh`` reads the store at
    most that often, so a pause is honoured by every replica within one heartbeat of it."""

    def __init__(self, store: PauseStore, outbox: EffectOutbox, clock: Clock, *,
                 every: float) -> None:
        self.store = store
        self.outbox = outbox
        self.clock = clock
        self.every = every
        self.pauses: dict[str, Pause] = {}  # the pauses on, by the ``waiting`` of the rows held
        self._on: dict[str, frozenset[str]] = {scope: frozenset() for scope in SCOPES}
        self.read_at: float | None = None  # clock time of the last successful read
        self.reads = 0  # successful reads (what "at most once per heartbeat" is checked on)
        self.released = 0  # rows this replica released
        self._next_read = -float("inf")
        self._next_sweep = -float("inf")
        self._release_passes = 0
        self._once = OnceLog(log)

    # --- the checks (in memory) ---------------------------------------------------------------

    def check(self, row: EffectRow) -> None:
        """Raise ``Paused`` when the row's tenant or subscription is paused. Only a
        subscription's rows are held (launches and the kinds a deployment registers); a
        projection row is not."""
        if row.sub_id is None:
            return
        if row.tenant_id in self._on["tenant"]:
            raise Paused("tenant", row.tenant_id)
        if row.sub_id in self._on["subscription"]:
            raise Paused("subscription", row.sub_id)

    def check_bot(self, bot: str) -> None:
        """Raise ``Paused`` when ``bot`` is paused (the launch handler, before the limits)."""
        if bot in self._on["bot"]:
            raise Paused("bot", bot)

    def by_scope(self) -> dict[str, int]:
        """The pauses on, counted by scope (every scope, 0 included): the gauge."""
        return {scope: len(keys) for scope, keys in self._on.items()}

    # --- the read, once per heartbeat -----------------------------------------------------------

    async def refresh(self, *, force: bool = False, strict: bool = False) -> bool:
        """Read the pause set, unless it was read less than ``every`` ago (``force``: read
        anyway); then release the rows of the pauses that are no longer on (see the module
        doc). True when it read. A store error keeps the last set (logged once; ``strict``:
        raised, for the first read at start-up)."""
        now = self.clock.now()
        if not force and now < self._next_read:
            return False
        self._next_read = now + self.every
        try:
            pauses = await self.store.all()
        except (StoreUnavailable, StoreError) as exc:
            if strict:
                raise
            self._once(("read", type(exc).__name__), logging.WARNING,
                       "could not read the pauses (%s): keeping the last %d", exc,
                       len(self.pauses))
            return False
        await self.adopt(pauses)
        return True

    async def adopt(self, pauses: Collection[Pause]) -> None:
        """The pause set as just read (by ``refresh``, or by the heartbeat it rides, S6): the
        pauses on are honoured from now on, and the rows of those lifted since are released."""
        now = self.clock.now()
        self._once.forget(("read", "StoreUnavailable"))
        self._once.forget(("read", "StoreError"))
        self.reads += 1
        self.read_at = now
        on = {p.holds: p for p in pauses if p.active}
        lifted = self.pauses.keys() - on.keys()
        for why in sorted(on.keys() - self.pauses.keys()):
            log.info("pause on: %s", why, extra={"pause": on[why].id, "by": on[why].by})
        for why in sorted(lifted):
            log.info("pause lifted: %s", why, extra={"pause": self.pauses[why].id})
        self._set(on)
        if lifted:
            self._release_passes = RELEASE_PASSES
        if self._release_passes or now >= self._next_sweep:
            self._release_passes = max(0, self._release_passes - 1)
            self._next_sweep = now + RELEASE_SWEEP_SECONDS
            await self._release(now)

    def _set(self, on: Mapping[str, Pause]) -> None:
        self.pauses = dict(on)
        self._on = {scope: frozenset(p.key for p in on.values() if p.scope == scope)
                    for scope in SCOPES}

    async def _release(self, now: float) -> None:
        try:
            n = await self.outbox.release_held(now, keep=self.holding)
        except (StoreUnavailable, StoreError) as exc:  # the next pass (or the sweep) releases
            self._release_passes = max(self._release_passes, 1)
            self._once(("release", type(exc).__name__), logging.WARNING,
                       "could not release the rows of lifted pauses (%s): trying again", exc)
            return
        self.released += n
        if n:
            log.info("released %d held row(s) of lifted pauses", n)

    @property
    def holding(self) -> Collection[str]:
        """What the rows held by the pauses on say they wait on."""
        return frozenset(self.pauses)
