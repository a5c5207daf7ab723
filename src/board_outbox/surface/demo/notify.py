"""``notify``: the example user effect kind, shipped for the demo and docs/extending.md. It imports
only the public SDK, exactly as a deployment's own handler would, and is registered like one:

```toml
[handlers]
notify = "board_outbox.surface.demo.notify:Notify"
```

A subscription with ``kind = "notify"`` then owes one ``notify`` row per matching event (the tail
writes it, carrying ``sub_id`` and the event snapshot). The handler reads the subscription as it
is now (deleted, edited to no longer match or to another kind: the row is dropped with that
outcome, as a launch is), and records the notification for the subscription's ``bot`` -- here
the recipient, e.g. a team channel -- in the ``notifications`` read model: per subscription, the
newest events it notified about. The write is merged by seq, so a row that runs twice (a crash
before its done mark, a replay) notifies once.
"""

from __future__ import annotations

from typing import Any, ClassVar

from board_outbox.sdk import (
    EffectRow,
    ExecutionContext,
    HandlerContext,
    PermanentEffectError,
    PushRecent,
    ReadModelStore,
    SubscriptionNotFound,
    matches,
)

KIND = "notify"
TOPIC = "board_outbox.surface.demo.notify:Notify"


class Notify:
    model: ClassVar[str] = "notifications"  # the read model it writes, keyed by subscription
    keep: ClassVar[int] = 100  # notifications kept per subscription, newest first

    def __init__(self, ctx: HandlerContext) -> None:
        self.subs = ctx.subs
        self.readmodels = ctx.readmodels

    async def execute(self, row: EffectRow, ctx: ExecutionContext[Any]) -> str:
        if row.sub_id is None or row.event is None:
            raise PermanentEffectError("notify row without sub_id or event")  # dead-letter now
        try:
            sub = await self.subs.get(row.sub_id)  # a store error propagates: retried
        except SubscriptionNotFound:
            return "dropped: subscription deleted"
        if sub.tenant_id != row.tenant_id:
            raise PermanentEffectError(f"row of tenant {row.tenant_id!r} names subscription "
                                       f"{sub.sub_id!r} of tenant {sub.tenant_id!r}")
        if sub.kind != row.kind or not matches(sub, row.event):
            return "dropped: no longer matches"
        ev = row.event
        entry = {"to": sub.bot, "card_id": ev.card_id, "type": ev.type, "column": ev.column,
                 "title": ev.title, "actor": ev.actor}
        await self.readmodels.write_many(self.model, row.tenant_id, [
            PushRecent(key=sub.sub_id, seq=row.seq, entry=entry, keep=self.keep)])
        return f"notified {sub.bot}"



async def notifications(readmodels: ReadModelStore, tenant_id: str, sub_id: str) -> list[dict[str, Any]]:
    """A subscription's newest notifications (at most ``Notify.keep``), newest first."""
    doc = await readmodels.get(Notify.model, tenant_id, sub_id)
    return list(doc.get("recent", [])) if doc else []
