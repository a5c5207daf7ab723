"""In-memory twins of every port: the test backend and the demo's embedded default."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..faults import FaultInjector
from .board import MemoryBoard, MemoryLauncher, MemorySubscriptionStore
from .cursors import MemoryCursorStore, MemoryResumeTokenStore
from .events import MemoryEventLog
from .outbox import MemoryEffectOutbox
from .readmodels import MemoryReadModelStore

if TYPE_CHECKING:
    from ..ports import Launcher
    from ..runtime import Stores

__all__ = [
    "MemoryBackend",
    "MemoryBoard",
    "MemoryCursorStore",
    "MemoryEffectOutbox",
    "MemoryEventLog",
    "MemoryLauncher",
    "MemoryReadModelStore",
    "MemoryResumeTokenStore",
    "MemorySubscriptionStore",
]


@dataclass
class MemoryBackend:
    """Every in-memory store. ``faults`` reaches the change feed and the launcher; faults at
    any port call come from wrapping the ports in ``faults.FaultProxy``."""

    faults: FaultInjector = field(default_factory=FaultInjector)

    def __post_init__(self) -> None:
        self.events = MemoryEventLog(self.faults)
        self.cursors = MemoryCursorStore()
        self.outbox = MemoryEffectOutbox()
        self.subs = MemorySubscriptionStore()
        self.board = MemoryBoard()
        self.launcher = MemoryLauncher(self.faults)
        self.tokens = MemoryResumeTokenStore()
        self.readmodels = MemoryReadModelStore()

    def stores(self, launcher: Launcher | None = None) -> Stores:
        """Every port of this backend (the event log doubles as the change feed)."""
        from ..runtime import Stores

        return Stores(
            events=self.events, cursors=self.cursors, outbox=self.outbox, subs=self.subs,
            cards=self.board, labels=self.board, launcher=launcher or self.launcher,
            readmodels=self.readmodels, feed=self.events, tokens=self.tokens,
        )
