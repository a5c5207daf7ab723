"""The tenants' half of the tail (a part of ``Tail``, ``engine/tail/tail.py``): which tenants
it drains (M11, R2), the poll net over counters and cursors (S2), the cursors held ahead of
their counter (R2), the new idle tenants seeded in one write, the store-wide epoch and a
tenant's first cursor (M7). Apart from the draining itself: this decides where a drain starts
and whether it runs at all; ``Tail`` reads and materializes the batches.
"""

from __future__ import annotations

import logging

from board_outbox.engine.tail.drain import Figures, TailSettings
from board_outbox.model.bad_documents import OnceLog, cap
from board_outbox.model.clock import Clock
from board_outbox.model.errors import StoreError
from board_outbox.model.validation import is_seq, tenant_problem
from board_outbox.ports import CursorStore, EffectOutbox, EventLog, SubscriptionStore

log = logging.getLogger("board_outbox.tail")


class TailTenants:
    """The tenants' half of ``Tail``: the attributes below are the tail's own (``Tail.__init__``)."""

    events: EventLog
    cursors: CursorStore
    outbox: EffectOutbox
    subs: SubscriptionStore
    clock: Clock
    settings: TailSettings
    projections: tuple[str, ...]
    cursor_ahead: dict[str, tuple[int, int]]
    seen: frozenset[str]
    figures: Figures | None
    epoch: float | None
    _once: OnceLog
    _to_seed: dict[str, int]

    async def tenants(self) -> set[str]:
        """Tenants to drain: with subscriptions, with live rows (M11), and -- when projections
        are on -- every tenant with events (a projection owes a row for every event)."""
        found = await self.subs.tenants()
        found |= await self.outbox.live_tenants()
        if self.projections:
            found |= await self.events.tenants()
        return {t for t in found if self._drainable(t)}

    def _drainable(self, tenant_id: str) -> bool:
        """R2: a tenant id that cannot be embedded in card and row keys (a "/" in it would read
        another tenant's keys) is left alone, with one error line."""
        problem = tenant_problem(tenant_id)
        if problem is None:
            return True
        self._once(("tenant", tenant_id), logging.ERROR, "tenant not drained: %s", problem,
                   extra={"tenant_id": cap(tenant_id, 200)})
        return False

    async def behind(self) -> list[str]:
        """The poll net in a constant number of queries (S2): tenants whose allocator is ahead
        of their cursor (or that have events and no cursor yet), among those to drain (M11).
        Without projections, only tenants with subscriptions or live rows are drained.

        Tenants with a counter at 0 and no cursor (new, idle) are seeded at 0 in one bulk
        write, not drained one by one: 20,000 of them cost one write, not minutes (item 7).
        A cursor ahead of its counter (restored or hand-edited) is checked here, every pass: its
        tenant is held (``cursor_ahead``) until an operator resets the cursor -- draining it
        would skip the events numbered up to the cursor, silently (R2)."""
        # cursors first: a counter read after the cursor is never below it, so a cursor that
        # another replica advances meanwhile never looks ahead of its counter (which would hold
        # the tenant until an operator resets it)
        cursors = {t: c for t, c in (await self.cursors.all()).items() if is_seq(c)}
        heads = await self.events.heads()
        self.seen |= frozenset(heads)  # a tenant, once seen, stays known (S5)
        self.figures = Figures(heads=heads, cursors=cursors, at=self.clock.now())
        await self._check_ahead(heads, cursors, await self.cursors.holds())
        # R2: a counter that is not a true int says nothing; a bad cursor makes its tenant look
        # behind, so its drain stalls it alone, with the reason
        ahead = {t for t, head in heads.items() if is_seq(head) and head > cursors.get(t, -1)}
        fresh = {t for t in ahead if heads[t] == 0 and t not in cursors}
        if ahead and not self.projections:
            ahead &= await self.subs.tenants() | await self.outbox.live_tenants()
        # seeded after this pass's drains (``drain_all``): a live tenant's event never waits
        # for the bulk write
        self._to_seed = {t: 0 for t in fresh & ahead if tenant_problem(t) is None}
        return sorted(ahead - fresh - set(self.cursor_ahead))

    async def seed_new(self) -> None:
        """Seed the new, idle tenants ``behind`` found, in one bulk write."""
        seed, self._to_seed = self._to_seed, {}
        if not seed:
            return
        try:
            await self.cursors.seed_many(seed)
        except StoreError as exc:  # the next pass finds them again
            log.warning("seeding %d new tenant cursor(s) failed: %s", len(seed), exc)
            return
        log.info("%d new tenant cursor(s) seeded at 0", len(seed))

    async def _check_ahead(self, heads: dict[str, int], cursors: dict[str, int],
                           stored: dict[str, tuple[int, int]]) -> None:
        held: dict[str, tuple[int, int]] = {}
        for t, cur in cursors.items():
            was = self.cursor_ahead.get(t) or stored.get(t)
            head = heads.get(t)  # None: no counter, or one that does not parse -- says nothing
            if was is not None and was[0] == cur:
                held[t] = was  # still the cursor we refused: keep holding the tenant
            elif head is not None and cur > head:
                held[t] = (cur, head)
                # durable: a restart after the counter has caught up still holds the tenant
                await self.cursors.hold(t, cur, head)
                self._once(("cursor_ahead", t, cur), logging.ERROR,
                           "cursor ahead of its counter: tenant %s has cursor %d but only %d "
                           "events were allocated; the tenant is held (nothing drained, nothing "
                           "skipped) until `board-outbox cursor reset --tenant %s --to N`", t, cur,
                           head, t, extra={"tenant_id": t, "cursor": cur, "seq": head})
        for t in set(self.cursor_ahead) - set(held):
            log.warning("tenant %s no longer held: its cursor was reset", t,
                        extra={"tenant_id": t})
        self.cursor_ahead = held

    async def begin(self) -> float:
        """The store-wide epoch: written by the first replica ever to start (at its clock's now),
        read by every later one. The service calls this before its loops start, so "latest"
        means "before this deployment began following the board", not "before this replica
        first read the tenant"."""
        if self.epoch is None:
            self.epoch = await self.cursors.epoch(self.clock.now())
        return self.epoch

    async def cursor(self, tenant_id: str) -> int:
        cur = await self.cursors.get(tenant_id)
        if cur is not None:
            return cur
        seed = 0
        if self.settings.seed == "latest":
            # the highest INSERTED seq written by the epoch: seqs allocated but not yet inserted
            # will still be read (M7), and so will every event of a tenant born after the epoch
            # (while the service runs, or while every replica was down); never past the counter
            # (a planted seq beyond it is poison, not a head: R2)
            seed = await self.events.seq_before(tenant_id, await self.begin())
            if seed > 0:
                seed = min(seed, await self.events.allocated_seq(tenant_id))
        got = await self.cursors.seed(tenant_id, seed)
        log.info("cursor seeded", extra={"tenant_id": tenant_id, "seq": got})
        return got
