"""A user's plugins, as a deployment would write them outside board-outbox (tests of P1), and
classes that do not fit the protocols (each must be a one-line config error). Like any user's
code, it imports only the public face, ``board_outbox.sdk``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from board_outbox.sdk import (
    EffectRow,
    EventSnapshot,
    ExecutionContext,
    HandlerContext,
    PermanentEffectError,
    ReadModelStore,
    UpsertIfNewer,
)


class TitleLog:
    """A user read model: each card's latest title and who set it (seq-guarded, so repeats and
    reorderings converge)."""

    name: ClassVar[str] = "title-log"

    def __init__(self, store: ReadModelStore) -> None:
        self.store = store

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        ok = await self.store.upsert_if_newer(self.name, tenant_id, event.card_id, event.seq,
                                              {"title": event.title, "by": event.actor})
        return "titled" if ok else "stale"

    async def apply_many(self, tenant_id: str, events: Sequence[EventSnapshot]) -> list[str]:
        oks = await self.store.write_many(self.name, tenant_id, [
            UpsertIfNewer(key=e.card_id, seq=e.seq, doc={"title": e.title, "by": e.actor})
            for e in events])
        return ["titled" if ok else "stale" for ok in oks]

    async def reset(self, tenant_id: str) -> None:
        await self.store.reset(self.name, tenant_id)


class ApplyOnly:
    """A user projection without apply_many: the worker still batches its marks."""

    name: ClassVar[str] = "apply-only"

    def __init__(self, store: ReadModelStore) -> None:
        self.store = store

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        await self.store.upsert_if_newer(self.name, tenant_id, event.card_id, event.seq,
                                         {"type": event.type})
        return "ok"

    async def reset(self, tenant_id: str) -> None:
        await self.store.reset(self.name, tenant_id)


NOTIFIED: list[str] = []


class Notify:
    """A user effect kind: rows of kind ``notify``; a row whose key ends in ``/poison`` always
    fails (retried with backoff, then dead-lettered), ``/fatal`` fails permanently."""

    def __init__(self, ctx: HandlerContext) -> None:
        self.ctx = ctx

    async def execute(self, row: EffectRow, ctx: ExecutionContext[Any]) -> str:
        if row.row_key.endswith("/poison"):
            raise RuntimeError("notification service said no")
        if row.row_key.endswith("/fatal"):
            raise PermanentEffectError("no such recipient")
        NOTIFIED.append(row.row_key)
        return "notified"


# --- classes that do not fit ------------------------------------------------------------------


class NoReset:
    name: ClassVar[str] = "no-reset"

    def __init__(self, store: ReadModelStore) -> None: ...

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        return ""


class SyncApply(NoReset):
    name: ClassVar[str] = "sync-apply"

    def apply(self, tenant_id: str, event: EventSnapshot) -> str:  # type: ignore[override]
        return ""

    async def reset(self, tenant_id: str) -> None: ...


class BadCtor(TitleLog):
    name: ClassVar[str] = "bad-ctor"

    def __init__(self, store: ReadModelStore, extra: int) -> None:
        super().__init__(store)


class FailingCtor(TitleLog):
    name: ClassVar[str] = "failing-ctor"

    def __init__(self, store: ReadModelStore) -> None:
        raise RuntimeError("no database for me")


class FakeReflect(TitleLog):
    name: ClassVar[str] = "board-reflect"


class NoName:
    def __init__(self, store: ReadModelStore) -> None: ...

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        return ""

    async def reset(self, tenant_id: str) -> None: ...


not_a_class = TitleLog(None)  # type: ignore[arg-type]


class RaisesAtSeq3:
    """A user projection with a bug: the event at seq 3 makes it raise (what `rebuild --shadow`
    must end with one line, the pointer consistent)."""

    name: ClassVar[str] = "raises-at-3"

    def __init__(self, store: ReadModelStore) -> None:
        self.store = store

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        if event.seq == 3:
            raise ValueError(f"cannot project {event.card_id!r}: this projection has a bug")
        await self.store.upsert_if_newer(self.name, tenant_id, event.card_id, event.seq,
                                         {"type": event.type})
        return "ok"

    async def reset(self, tenant_id: str) -> None:
        await self.store.reset(self.name, tenant_id)
