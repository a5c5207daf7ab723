"""Which tenants need a look (behind, or holding dead-letters), most behind first: one view
shared by every page load of the console, whatever the number of loads, pages and viewers.

A tenant's lag is its counter (the board's document, bumped on every event) minus its cursor
(ours): two documents, so no index can serve "most behind first", and the tenants behind are
found by reading every counter and cursor -- one aggregate in the store
(``StatusStore.attention``), a native scan on mongod but a cost that grows with the tenants.

Alone (``board-outbox console``) that aggregate runs at most once per ``max_age`` (a replica's
``service.metrics_interval_seconds``) for the first ``VIEW_PAGES`` pages and the totals; each
page load cuts its page from the last view, and a view past its age is refreshed after the
response that found it so (the next load shows it). A load waits for the aggregate only when
there is no view yet, or the last one is older than ``WAIT_AFTER`` ages (a console nobody
looked at for a while). Pages past the view's are read in the store, for their load only.

Beside a replica (``run`` with ``[ui] enabled``) the view is the replica's own status of every
tenant (its metrics refresh), sorted once per refresh instead of once per page load."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import anyio
import msgspec

from board_outbox.model.errors import BoardOutboxError
from board_outbox.model.records import AttentionPage, TenantLag
from board_outbox.ports import StatusStore
from board_outbox.service.health import TenantStatus

log = logging.getLogger("board_outbox.console")

VIEW_PAGES = 10  # pages of one view (alone): the first ones, the ones an operator reads
WAIT_AFTER = 3  # a view older than this many ages is not shown: the load waits for a fresh one


@dataclass(frozen=True)
class View:
    """The tenants that need a look, most behind first, as of one read."""

    look: AttentionPage  # its tenants: the first pages' (all of them when fewer)
    read_at: float  # when the read began (the view's clock)
    at: float  # the same, as wall-clock epoch seconds (shown on the page)
    stalled: list[TenantStatus] | None = None  # beside a replica: the stalled, longest first

    def cut(self, offset: int, limit: int) -> AttentionPage | None:
        """One page of the view; None when it reaches past the tenants the view holds."""
        held = len(self.look.tenants)
        if offset + limit > held and held < self.look.listed:
            return None
        return msgspec.structs.replace(self.look, tenants=self.look.tenants[offset:offset + limit])


def sorted_view(every: Mapping[str, TenantStatus], at: float, read_at: float) -> View:
    """A view of statuses already in memory (a replica's, or every tenant's), sorted once."""
    lags = [TenantLag(tenant_id=t, head=s.allocated_seq, cursor=s.cursor,
                      dead_letters=s.dead_letters) for t, s in every.items()]
    look = sorted((t for t in lags if t.lag or t.dead_letters),
                  key=lambda t: (-t.lag, -t.dead_letters, t.tenant_id))
    stalled = sorted((s for s in every.values() if s.stalled),
                     key=lambda s: (-s.stalled_for_seconds, s.tenant_id))
    return View(AttentionPage(tenants=look, listed=len(look), total=len(lags),
                              behind=sum(1 for t in lags if t.lag),
                              events_behind=sum(t.lag for t in lags),
                              dead_letters=sum(t.dead_letters for t in lags)),
                read_at, at, stalled)


class SharedAttention:
    """The standalone console's view, read from the store at most once per ``max_age``."""

    def __init__(self, status: StatusStore, max_age: float, page_size: int, *,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.status, self.max_age, self.page_size = status, max_age, page_size
        self.clock, self.wall = clock, wall
        self.view: View | None = None
        self.reads = 0  # views read from the store (one aggregate each)
        self._lock = anyio.Lock()

    async def page(self, offset: int) -> tuple[AttentionPage, float]:
        """The page from ``offset`` and the wall-clock time its figures were read."""
        view = self.view
        if view is None or self.clock() - view.read_at >= WAIT_AFTER * self.max_age:
            view = await self.refresh()
        cut = view.cut(offset, self.page_size)
        if cut is not None:
            return cut, view.at
        at = self.wall()  # past the view's pages: this load reads its own page in the store
        return await self.status.attention(offset, self.page_size), at

    def due(self) -> bool:
        """The view is past its age and no read of a new one is under way."""
        return (self.view is not None and not self._lock.locked()
                and self.clock() - self.view.read_at >= self.max_age)

    async def refresh(self) -> View:
        """Read a new view; loads that ask meanwhile wait for the same read, not their own."""
        reads = self.reads
        async with self._lock:
            if self.reads > reads and self.view is not None:
                return self.view  # read while this one waited
            read_at, at = self.clock(), self.wall()
            look = await self.status.attention(0, VIEW_PAGES * self.page_size)
            self.reads += 1
            self.view = View(look, read_at, at)
            return self.view

    async def refresh_after_response(self) -> None:
        """The refresh a page load leaves behind it (its response already sent): a store that
        fails costs a line here; a load that finds the view too old then reads (or fails) itself."""
        if not self.due():
            return
        try:
            await self.refresh()
        except BoardOutboxError as exc:
            log.warning("console: reading the tenants that need a look failed: %s: %s",
                        type(exc).__name__, exc)
