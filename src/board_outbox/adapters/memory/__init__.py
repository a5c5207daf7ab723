"""In-memory twins of every port: the test backend and the demo's embedded default.

``open_stores`` is this package's factory (the runtime picks it by name); ``MemoryBackend``
holds every twin for tests that plant documents or read the twins' records."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from board_outbox.adapters.memory.api_tokens import MemoryApiTokenStore
from board_outbox.adapters.memory.cards import MemoryBoard
from board_outbox.adapters.memory.cursors import MemoryCursorStore
from board_outbox.adapters.memory.events import MemoryEventLog
from board_outbox.adapters.memory.generations import MemoryGenerationStore
from board_outbox.adapters.memory.launcher import MemoryLauncher
from board_outbox.adapters.memory.limits import MemoryLimitStore
from board_outbox.adapters.memory.membership import MemoryMembershipStore
from board_outbox.adapters.memory.outbox import MemoryEffectOutbox
from board_outbox.adapters.memory.pauses import MemoryPauseStore
from board_outbox.adapters.memory.probes import FaultPoints, NoFaults
from board_outbox.adapters.memory.readmodels import MemoryReadModelStore
from board_outbox.adapters.memory.series import MemorySeriesStore
from board_outbox.adapters.memory.sessions import MemorySessionStore
from board_outbox.adapters.memory.status import MemoryStatusStore
from board_outbox.adapters.memory.subscriptions import MemorySubscriptionStore
from board_outbox.adapters.memory.tokens import MemoryResumeTokenStore
from board_outbox.ports import Launcher, Stores

__all__ = [
    "FaultPoints",
    "MemoryBackend",
    "MemoryBoard",
    "MemoryCursorStore",
    "MemoryEffectOutbox",
    "MemoryEventLog",
    "MemoryLauncher",
    "MemoryLimitStore",
    "MemoryMembershipStore",
    "MemoryPauseStore",
    "MemoryReadModelStore",
    "MemoryResumeTokenStore",
    "MemorySeriesStore",
    "MemorySubscriptionStore",
    "open_stores",
]


@dataclass
class MemoryBackend:
    """Every in-memory store. ``faults`` reaches the change feed and the launcher; faults at
    any port call come from wrapping the ports from outside (tests/support/faults.FaultProxy)."""

    faults: FaultPoints = field(default_factory=NoFaults)

    def __post_init__(self) -> None:
        self.events = MemoryEventLog(self.faults)
        self.cursors = MemoryCursorStore()
        self.outbox = MemoryEffectOutbox()
        self.subs = MemorySubscriptionStore()
        self.subs.listeners.append(self.events.subscription_changed)  # one feed carries both
        self.board = MemoryBoard()
        self.launcher = MemoryLauncher(self.faults)
        self.tokens = MemoryResumeTokenStore()
        self.readmodels = MemoryReadModelStore()
        self.rm_versions = MemoryGenerationStore()
        self.limits = MemoryLimitStore()
        self.sessions = MemorySessionStore()
        self.pauses = MemoryPauseStore()
        self.members = MemoryMembershipStore(self.pauses)  # the pauses ride the heartbeat
        self.series = MemorySeriesStore()
        self.api_tokens = MemoryApiTokenStore()

    def stores(self, launcher: Launcher | None = None) -> Stores:
        """Every port of this backend (the event log doubles as the change feed)."""
        return Stores(
            events=self.events, cursors=self.cursors, outbox=self.outbox, subs=self.subs,
            cards=self.board, labels=self.board, launcher=launcher or self.launcher,
            readmodels=self.readmodels, feed=self.events, tokens=self.tokens,
            members=self.members, rm_versions=self.rm_versions,
            status=MemoryStatusStore(self.events, self.outbox, self.cursors), limits=self.limits,
            sessions=self.sessions, pauses=self.pauses, series=self.series,
            sub_admin=self.subs, api_tokens=self.api_tokens,
        )


@asynccontextmanager
async def open_stores(*, launcher: Launcher | None = None) -> AsyncIterator[Stores]:
    """The factory: a fresh in-memory backend's ports (``launcher`` replaces its recorder)."""
    yield MemoryBackend().stores(launcher)
