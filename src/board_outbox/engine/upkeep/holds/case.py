"""One row being explained (``Case``): what every hold check reads -- the row, the store, the
settings its wait depends on (``ExplainSettings``) -- and the notes the checks leave; kept apart
so each family of checks depends on it alone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec

from board_outbox.engine.flow.limits import LimitSettings
from board_outbox.engine.flow.membership import MembershipSettings
from board_outbox.engine.work.worksettings import WorkerSettings
from board_outbox.model.errors import MalformedDocument, SubscriptionNotFound
from board_outbox.model.explanation import Hold
from board_outbox.model.retention import Retention
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import Stores


class ExplainSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The settings a row's wait depends on: the configuration's own sections."""

    worker: WorkerSettings = WorkerSettings()
    limits: LimitSettings = LimitSettings()
    membership: MembershipSettings = MembershipSettings()
    retention: Retention = Retention()  # how long a settled row is kept before it is gone (O8)


_NOT_READ = object()


@dataclass
class Case:
    """One row being explained: what every check may read, and the notes they leave."""

    row: EffectRow
    now: float
    stores: Stores
    settings: ExplainSettings
    notes: list[str] = field(default_factory=list)
    paused: bool = False  # a pause holds it: it tries no limit (``paused``)
    _sub: object = _NOT_READ

    async def subscription(self) -> Subscription | None:
        """The row's subscription as it is now, read once (None: gone, or unreadable: a note
        says which)."""
        if self._sub is _NOT_READ:
            self._sub = None
            if self.row.sub_id is not None:
                try:
                    self._sub = await self.stores.subs.get(self.row.sub_id)
                except SubscriptionNotFound:
                    self.notes.append(f"subscription {self.row.sub_id!r} is deleted: the row is "
                                      "dropped (done, not run) when it is claimed")
                except MalformedDocument as exc:
                    self.notes.append(f"its subscription does not decode ({exc}): the row is "
                                      "dead-lettered when it is claimed")
        return self._sub if isinstance(self._sub, Subscription) else None


HoldCheck = Callable[[Case], Awaitable[list[Hold]]]


def from_now(seconds: float) -> str:
    """A moment ``seconds`` from now, in words: "in 2.0s" or "2.0s ago"."""
    return f"in {seconds:.1f}s" if seconds >= 0 else f"{-seconds:.1f}s ago"


def last_error(row: EffectRow) -> str | None:
    """The error of the row's last failed attempt (None: none recorded)."""
    return row.errors[-1].error if row.errors else None
