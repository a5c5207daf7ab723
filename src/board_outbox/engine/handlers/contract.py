"""What a handler is and what it may do: the ``EffectHandler`` and ``Projection`` protocols, their
named optional hooks (``PreparingHandler.prepare``, ``BatchProjection.apply_many``), the
``ExecutionContext`` a handler gets with its row and the ``HandlerContext`` a user handler is built
with. Re-exported by ``board_outbox.sdk``, the public face."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from opentelemetry import context as otel_context
from opentelemetry.context import Context

from board_outbox.engine import telemetry
from board_outbox.model import transitions as T
from board_outbox.model.board import EventSnapshot
from board_outbox.model.clock import Clock
from board_outbox.model.errors import LeaseLost
from board_outbox.model.records import Claim
from board_outbox.model.rows import EffectRow
from board_outbox.ports import CardStore, EffectOutbox, Launcher, ReadModelStore, Stores, SubscriptionStore

P = TypeVar("P")


class ExecutionContext(Generic[P]):
    """What a handler may do besides its effect: fenced writes on its own claimed row, what its
    ``prepare`` read for the whole claimed batch (``prefetched``; None: read per row), and
    ``riders``: callables the row's lease heartbeat runs at each beat while the lease holds (a
    handler adds one for what it must renew while it runs -- the launch's in-flight slots -- and
    removes it when done; with the heartbeat off, or outside a worker, none runs)."""

    def __init__(self, claim: Claim, outbox: EffectOutbox, clock: Clock,
                 prefetched: P | None = None,
                 riders: list[Callable[[], Awaitable[None]]] | None = None) -> None:
        self.claim = claim
        self.outbox = outbox
        self.clock = clock
        self.prefetched: P | None = prefetched
        self.riders: list[Callable[[], Awaitable[None]]] = [] if riders is None else riders
        # C7: the OpenTelemetry context the row runs in (its execute span is current), for the
        # handler's own spans (``context=``) and calls (``trace_headers``)
        self.trace_context: Context = otel_context.get_current()

    def trace_headers(self) -> dict[str, str]:
        """The headers that carry this row's trace to a call the handler makes (W3C
        ``traceparent``/``tracestate`` by default; ``OTEL_PROPAGATORS`` chooses): the callee's
        work joins the row's trace, under its execute span. Empty without a trace."""
        return telemetry.headers(self.trace_context)

    @property
    def attempt(self) -> int:
        assert self.claim.row is not None
        return self.claim.row.attempts + 1

    async def mark_consumed(self) -> None:
        """Persist consume_marked (M6). Raises ``LeaseLost`` if our claim was stolen."""
        ok = await self.outbox.apply_claimed(self.claim.ref, self.claim.claim_id,
                                             T.consumed(now=self.clock.now()))
        if not ok:
            raise LeaseLost(f"claim {self.claim.claim_id} lost before consume_marked")


@runtime_checkable
class EffectHandler(Protocol):
    async def execute(self, row: EffectRow, ctx: ExecutionContext[Any]) -> str:
        """Perform the effect; return an outcome label. Raise ``EffectError`` to retry,
        ``PermanentEffectError`` to dead-letter at once."""
        ...


@runtime_checkable
class PreparingHandler(EffectHandler, Protocol):
    """A handler with a batch read: ``prepare(rows)`` once per claimed batch (e.g. every
    subscription the batch names, in one query); each row's ``ctx.prefetched`` holds its result.
    A ``StoreUnavailable`` from it only means per-row reads."""

    async def prepare(self, rows: Sequence[EffectRow]) -> Any: ...


@runtime_checkable
class Projection(Protocol):
    """A read model fed by ``projection`` rows; applying the same event twice is a no-op."""

    @property
    def name(self) -> str: ...

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str: ...

    async def reset(self, tenant_id: str) -> None: ...


@runtime_checkable
class BatchProjection(Projection, Protocol):
    """A projection that applies a batch of one tenant's events at once (P2: one read-model bulk
    write); one outcome label per event, in order."""

    async def apply_many(self, tenant_id: str, events: Sequence[EventSnapshot]) -> Sequence[str]: ...


@dataclass(frozen=True)
class HandlerContext:
    """What a user effect handler's constructor receives: the stores it may use. Its rows come
    with an ``ExecutionContext`` at ``execute`` time (fenced writes on the claimed row)."""

    readmodels: ReadModelStore
    cards: CardStore
    subs: SubscriptionStore
    launcher: Launcher

    @classmethod
    def of(cls, stores: Stores) -> HandlerContext:
        return cls(readmodels=stores.readmodels, cards=stores.cards, subs=stores.subs,
                   launcher=stores.launcher)
