"""The public face of board-outbox for plugin authors: everything a projection or an effect
handler needs, and nothing else. Import only from here (``from board_outbox.sdk import ...``);
every other module is private implementation and may move between releases.

- the values a plugin sees: ``EventSnapshot`` (one normalized event), ``EffectRow`` (one effect
  row), ``Subscription`` with its ``MatchRule`` and ``matches`` (re-verify a row against the
  subscription as it is now), the built-in kinds ``LAUNCH`` and ``PROJECTION``;
- the read-model store a projection writes through, and its write types: ``ReadModelStore``,
  ``UpsertIfNewer``, ``PushRecent``;
- projections: the ``Projection`` protocol and the named ``BatchProjection`` (``apply_many``);
- effect handlers: the ``EffectHandler`` protocol, the named ``PreparingHandler`` (``prepare``,
  one batch read per claim), the ``ExecutionContext`` each row runs with (``prefetched`` holds
  what ``prepare`` returned; ``trace_context`` and ``trace_headers()`` carry the row's trace to
  the handler's own spans and calls) and the ``HandlerContext`` a handler is constructed with;
- the error types a plugin raises or may see (``SubscriptionNotFound``: from ``subs.get`` when
  the subscription a row names was deleted).

Guide: docs/extending.md. Contract checks to call from a plugin's own tests:
``board_outbox.testing``. Writing events (the board application's side): ``board_outbox.producer``.
"""

from __future__ import annotations

from board_outbox.engine.handlers.contract import (
    BatchProjection,
    EffectHandler,
    ExecutionContext,
    HandlerContext,
    PreparingHandler,
    Projection,
)
from board_outbox.model.board import EventSnapshot
from board_outbox.model.errors import (
    BoardOutboxError,
    EffectError,
    LeaseLost,
    PermanentEffectError,
    StoreUnavailable,
    SubscriptionNotFound,
)
from board_outbox.model.ids import LAUNCH, PROJECTION
from board_outbox.model.records import PushRecent, UpsertIfNewer
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import MatchRule, Subscription, matches
from board_outbox.ports import ReadModelStore

__all__ = [
    "LAUNCH",
    "PROJECTION",
    "BatchProjection",
    "BoardOutboxError",
    "EffectError",
    "EffectHandler",
    "EffectRow",
    "EventSnapshot",
    "ExecutionContext",
    "HandlerContext",
    "LeaseLost",
    "MatchRule",
    "PermanentEffectError",
    "PreparingHandler",
    "Projection",
    "PushRecent",
    "ReadModelStore",
    "StoreUnavailable",
    "Subscription",
    "SubscriptionNotFound",
    "UpsertIfNewer",
    "matches",
]
