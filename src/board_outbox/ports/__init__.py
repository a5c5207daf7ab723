"""Ports: what the tail, the worker and the handlers need from the outside world.

One module per store family, each a set of protocols over the model's types:

- ``events``: the event log and the tail's cursors (``EventLog``, ``CursorStore``);
- ``feed``: the change stream and its resume token (``ChangeFeed``, ``ResumeTokenStore``);
- ``outbox``: the effect rows (``EffectOutbox``);
- ``subscriptions``: the service's reads and the operators' writes (``SubscriptionStore``,
  ``SubscriptionAdmin``);
- ``board``: cards and one-shot labels (``CardStore``, ``LabelStore``);
- ``readmodels``: read models and their generation pointer (``ReadModelStore``,
  ``ReadModelVersionStore``);
- ``coordination``: what replicas share (``MembershipStore``, ``LimitStore``, ``PauseStore``);
- ``operators``: the console's sessions, series and status figures, the JSON API's tokens
  (``SessionStore``, ``SeriesStore``, ``StatusStore``, ``ApiTokenStore``);
- ``launcher``: what starts a bot (``Launcher``);
- ``stores``: ``Stores``, one backend's set;
- ``values``: the leaf types the ports define (``ConsumeOutcome``, ``ReadModelOp``), which the
  families import and which import only the model, so no module of the package loops.

This module is the public face: it re-exports every protocol and the model's records the ports
speak (``__all__``), so ``from board_outbox.ports import EffectOutbox`` reads as before.

Adapters live in ``board_outbox.adapters.memory`` (test twins, also the demo backend) and
``board_outbox.adapters.mongo`` (production, pymongo's async API). Both run the same contract suite.
Every method may raise ``StoreUnavailable`` for a transient failure.
"""

from __future__ import annotations

from board_outbox.model.pause import Pause
from board_outbox.model.records import (
    AttentionPage,
    Change,
    Claim,
    ClaimTerms,
    ConsoleSession,
    DoneLatency,
    EventRecord,
    FailedPage,
    LaunchRequest,
    LimitHolder,
    Member,
    PushRecent,
    ReadModelVersions,
    ReadModelWrites,
    RowFilter,
    RowIdentity,
    RowSummary,
    TenantLag,
    UpsertIfNewer,
    UpsertResult,
)
from board_outbox.model.series import SeriesPoint
from board_outbox.model.subscription_records import SubscriptionRecord
from board_outbox.model.transitions import Mark
from board_outbox.ports.board import CardStore, LabelStore
from board_outbox.ports.coordination import LimitStore, MembershipStore, PauseStore
from board_outbox.ports.events import CursorStore, EventLog
from board_outbox.ports.feed import ChangeFeed, ResumeTokenStore
from board_outbox.ports.launcher import Launcher
from board_outbox.ports.operators import ApiTokenStore, SeriesStore, SessionStore, StatusStore
from board_outbox.ports.outbox import EffectOutbox
from board_outbox.ports.readmodels import ReadModelStore, ReadModelVersionStore
from board_outbox.ports.stores import Stores
from board_outbox.ports.subscriptions import SubscriptionAdmin, SubscriptionStore
from board_outbox.ports.values import ConsumeOutcome, ReadModelOp

__all__ = [
    "ApiTokenStore",
    "AttentionPage",
    "CardStore",
    "Change",
    "ChangeFeed",
    "Claim",
    "ClaimTerms",
    "ConsoleSession",
    "ConsumeOutcome",
    "CursorStore",
    "DoneLatency",
    "EffectOutbox",
    "EventLog",
    "EventRecord",
    "FailedPage",
    "LabelStore",
    "LaunchRequest",
    "Launcher",
    "LimitHolder",
    "LimitStore",
    "Mark",
    "Member",
    "MembershipStore",
    "Pause",
    "PauseStore",
    "PushRecent",
    "ReadModelOp",
    "ReadModelStore",
    "ReadModelVersionStore",
    "ReadModelVersions",
    "ReadModelWrites",
    "ResumeTokenStore",
    "RowFilter",
    "RowIdentity",
    "RowSummary",
    "SeriesPoint",
    "SeriesStore",
    "SessionStore",
    "StatusStore",
    "Stores",
    "SubscriptionAdmin",
    "SubscriptionRecord",
    "SubscriptionStore",
    "TenantLag",
    "UpsertIfNewer",
    "UpsertResult",
]
