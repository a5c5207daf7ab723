"""MongoDB adapters on pymongo's native async API (``pymongo.AsyncMongoClient``).

``open_stores`` is this package's factory (the runtime picks it by name); it takes plain
settings, never the service configuration."""

from __future__ import annotations

from .cards import MongoBoard
from .changefeed import MongoChangeFeed
from .client import make_client, mongo_stores, open_stores
from .cursors import MongoCursorStore
from .events import MongoEventLog
from .membership import MongoMembershipStore
from .outbox import MongoEffectOutbox
from .readmodels import MongoReadModelStore
from .schema import ensure_schema
from .subscriptions import MongoSubscriptionStore
from .tokens import MongoResumeTokenStore

__all__ = [
    "MongoBoard",
    "MongoChangeFeed",
    "MongoCursorStore",
    "MongoEffectOutbox",
    "MongoEventLog",
    "MongoMembershipStore",
    "MongoReadModelStore",
    "MongoResumeTokenStore",
    "MongoSubscriptionStore",
    "ensure_schema",
    "make_client",
    "mongo_stores",
    "open_stores",
]
