"""``Stores``: one backend's adapters for every port."""

from __future__ import annotations

from dataclasses import dataclass

from board_outbox.ports.board import CardStore, LabelStore
from board_outbox.ports.coordination import LimitStore, MembershipStore, PauseStore
from board_outbox.ports.events import CursorStore, EventLog
from board_outbox.ports.feed import ChangeFeed, ResumeTokenStore
from board_outbox.ports.launcher import Launcher
from board_outbox.ports.operators import ApiTokenStore, SeriesStore, SessionStore, StatusStore
from board_outbox.ports.outbox import EffectOutbox
from board_outbox.ports.readmodels import ReadModelStore, ReadModelVersionStore
from board_outbox.ports.subscriptions import SubscriptionAdmin, SubscriptionStore

__all__ = ["Stores"]


@dataclass
class Stores:
    """One backend's adapters for every port (what an adapter package's factory returns)."""

    events: EventLog
    cursors: CursorStore
    outbox: EffectOutbox
    subs: SubscriptionStore
    cards: CardStore
    labels: LabelStore
    launcher: Launcher
    readmodels: ReadModelStore
    feed: ChangeFeed | None = None
    tokens: ResumeTokenStore | None = None
    members: MembershipStore | None = None
    rm_versions: ReadModelVersionStore | None = None
    status: StatusStore | None = None
    limits: LimitStore | None = None
    sessions: SessionStore | None = None
    pauses: PauseStore | None = None
    series: SeriesStore | None = None  # the console's charts
    # the operators' subscription management (P6; None: this backend offers none)
    sub_admin: SubscriptionAdmin | None = None
    # the JSON API's bearer tokens (A8; None: this backend offers none)
    api_tokens: ApiTokenStore | None = None
