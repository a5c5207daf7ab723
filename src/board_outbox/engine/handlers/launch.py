"""The ``launch`` effect handler: re-verify, consume one-shot labels once, launch the bot."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, nullcontext

from board_outbox.engine.flow.limits import LaunchGate
from board_outbox.engine.flow.pause import PauseGate
from board_outbox.engine.handlers.coalesce import coalesce_check
from board_outbox.engine.handlers.contract import ExecutionContext
from board_outbox.model.errors import (
    CardNotFound,
    CrossTenantRow,
    MalformedDocument,
    PermanentEffectError,
    StoreUnavailable,
    SubscriptionNotFound,
)
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import Subscription, matches
from board_outbox.ports import CardStore, LabelStore, Launcher, LaunchRequest, SubscriptionStore

log = logging.getLogger("board_outbox.launch")


class LaunchHandler:
    """``gate`` (F2): the concurrency and rate limits a launch must be within; None: none.
    ``pause`` (F3): the pauses a launch's bot is checked against; None: none."""

    def __init__(
        self, subs: SubscriptionStore, cards: CardStore, labels: LabelStore, launcher: Launcher,
        gate: LaunchGate | None = None, pause: PauseGate | None = None,
    ) -> None:
        self.subs = subs
        self.cards = cards
        self.labels = labels
        self.launcher = launcher
        self.gate = gate
        self.pause = pause

    async def prepare(self, rows: Sequence[EffectRow]) -> dict[str, Subscription]:
        """One read of every subscription a claimed batch names (S3): the worker hands it to
        each row's ``execute`` in ``ctx.prefetched``; a missing id falls back to ``get``."""
        return await self.subs.get_many({r.sub_id for r in rows if r.sub_id})

    async def execute(self, row: EffectRow, ctx: ExecutionContext[dict[str, Subscription]]) -> str:
        if row.sub_id is None or row.event is None:
            raise PermanentEffectError("launch row without sub_id or event")
        batch = ctx.prefetched or {}
        sub = batch.get(row.sub_id)
        if sub is None:
            try:
                sub = await self.subs.get(row.sub_id)  # StoreUnavailable propagates: retried (M10)
            except SubscriptionNotFound:
                return "dropped: subscription deleted"
            except MalformedDocument as exc:  # R2: parked at once with the reason, not retried
                raise PermanentEffectError(str(exc)) from None
        if sub.tenant_id != row.tenant_id:  # M10b
            raise CrossTenantRow(
                f"row of tenant {row.tenant_id!r} names subscription {sub.sub_id!r} "
                f"of tenant {sub.tenant_id!r}"
            )
        if sub.kind != row.kind and not row.consume_marked:
            # the subscription now asks for another effect kind (M10b); a consume_marked row
            # spent its labels for this launch already: it launches, as below
            return f"dropped: subscription now of kind {sub.kind!r}"
        if not row.consume_marked and not matches(sub, row.event):
            # Re-verify against the CURRENT rule (M10b). A consume_marked row already spent its
            # labels for this launch: it launches whatever the rule says now.
            return "dropped: no longer matches"
        if self.pause is not None:  # F3: a paused bot's launch is held (Paused)
            self.pause.check_bot(sub.bot)
        if sub.coalesce is not None and row.burst_at is not None and not row.consume_marked:
            # coalescing, before limits and labels: a row superseded by a newer row of its
            # (subscription, card) ends coalesced (a consume_marked row spent its labels for
            # this launch: it is never coalesced away)
            await coalesce_check(row, sub.coalesce, ctx.outbox, ctx.clock.now())
        # F2: within the limits before anything is spent (OverLimit: the worker defers the row)
        async with self._within_limits(row, sub, ctx):
            if sub.consume_labels and not row.consume_marked:
                try:
                    spent = await self.labels.consume(
                        row.tenant_id, row.event.card_id, sub.consume_labels, by=row.row_key
                    )
                except CardNotFound:
                    return "dropped: card deleted"
                if spent == "absent":
                    return "skipped: labels already consumed"
                # "consumed" now, or "already" by this very row on an earlier attempt that died
                # before persisting consume_marked: either way the launch is owed.
                await self._persist_consumed(row, ctx)
            return await self._launch(row, sub.bot, sub.sub_id)

    def _within_limits(
        self, row: EffectRow, sub: Subscription, ctx: ExecutionContext[dict[str, Subscription]]
    ) -> AbstractAsyncContextManager[None]:
        if self.gate is None:
            return nullcontext()
        # the slots ride on the row's lease heartbeat (``ctx.riders``) while the launch runs
        return self.gate.hold(row, sub, f"{row.row_key}:{ctx.claim.claim_id}", ctx.clock,
                              ctx.riders)

    async def _persist_consumed(self, row: EffectRow, ctx: ExecutionContext[dict[str, Subscription]]) -> None:
        """M6: persist consume_marked between the consume and the launch. A lost lease stops
        here (LeaseLost: the claim's new holder finds the one-shot spent by this row and
        launches); a store blip is retried, then the launch goes ahead unmarked -- the card's
        record of who spent the labels makes a later retry launch, not skip."""
        for attempt in range(3):
            try:
                await ctx.mark_consumed()
            except StoreUnavailable as exc:
                if attempt == 2:
                    log.warning("could not persist consume_marked (%s): launching anyway", exc,
                                extra={"row_key": row.row_key, "tenant_id": row.tenant_id})
                continue
            # durable: no retry of this row consults the card's record again, so its entry goes
            # (best effort: one left behind is only dead weight, and the record is capped)
            assert row.event is not None
            try:
                await self.labels.forget_consumed(row.tenant_id, row.event.card_id, row.row_key)
            except StoreUnavailable as exc:
                log.info("could not trim the card's consumed record (%s)", exc,
                         extra={"row_key": row.row_key, "tenant_id": row.tenant_id})
            return

    async def _launch(self, row: EffectRow, bot: str, sub_id: str) -> str:
        assert row.event is not None
        launch_id = await self.launcher.launch(
            LaunchRequest(
                tenant_id=row.tenant_id,
                bot=bot,
                card_id=row.event.card_id,
                sub_id=sub_id,
                seq=row.seq,
                row_key=row.row_key,
            )
        )
        return f"launched {launch_id}"
