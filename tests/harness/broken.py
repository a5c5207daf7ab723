"""Deliberately broken pipelines: the harness must catch each of them (or it proves nothing)."""

from __future__ import annotations

from typing import Any

import msgspec
from opentelemetry import trace

from board_outbox.engine.tail.tail import DrainResult, Tail
from board_outbox.model.rows import EffectRow
from board_outbox.ports import ClaimTerms, UpsertResult


class CursorFirstTail(Tail):
    """The shape ADR-094 replaced: advance the cursor, then write the rows. A crash between the
    two loses the batch for good. Everything else (gaps, poison, matching) is the real tail's:
    its upsert is only held back until the cursor CAS has succeeded."""

    async def _drain(self, tenant_id: str, res: DrainResult, span: trace.Span) -> None:
        outbox, cursors = self.outbox, self.cursors
        held: list[EffectRow] = []

        class Held:
            async def upsert_rows(self, rows: list[EffectRow], *,
                                  claim: ClaimTerms | None = None) -> UpsertResult:
                held.extend(rows)  # written born pending, after the CAS
                return UpsertResult(len(rows), 0)

        class CasFirst:
            def __getattr__(self, name: str) -> Any:
                return getattr(cursors, name)

            async def compare_and_set(self, tenant: str, expected: int, new: int) -> bool:
                ok = await cursors.compare_and_set(tenant, expected, new)
                if ok and held:
                    await outbox.upsert_rows(held)  # too late: the cursor already moved
                return ok

        self.outbox, self.cursors = Held(), CasFirst()  # type: ignore[assignment]
        try:
            await super()._drain(tenant_id, res, span)
        finally:
            self.outbox, self.cursors = outbox, cursors


class EagerPoisonTail(Tail):
    """Skips a poison event at its first head-of-line tick instead of after ``poison_ticks``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = msgspec.structs.replace(self.settings, poison_ticks=1)


class AllocatorSeedTail(Tail):
    """Seeds a ``latest`` cursor from the seq allocator instead of the highest INSERTED seq, so
    an event allocated but not yet inserted is skipped."""

    async def cursor(self, tenant_id: str) -> int:
        cur = await self.cursors.get(tenant_id)
        if cur is not None:
            return cur
        seed = 0
        if self.settings.seed == "latest":
            seed = await self.events.allocated_seq(tenant_id)
        return await self.cursors.seed(tenant_id, seed)
