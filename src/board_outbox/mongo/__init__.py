"""MongoDB adapters on pymongo's native async API (``pymongo.AsyncMongoClient``)."""

from __future__ import annotations

from .board import MongoBoard, MongoReadModelStore, MongoSubscriptionStore
from .changefeed import MongoChangeFeed
from .client import make_client, mongo_stores
from .cursors import MongoCursorStore, MongoResumeTokenStore
from .events import MongoEventLog
from .outbox import MongoEffectOutbox
from .schema import ensure_schema

__all__ = [
    "MongoBoard",
    "MongoChangeFeed",
    "MongoCursorStore",
    "MongoEffectOutbox",
    "MongoEventLog",
    "MongoReadModelStore",
    "MongoResumeTokenStore",
    "MongoSubscriptionStore",
    "ensure_schema",
    "make_client",
    "mongo_stores",
]
