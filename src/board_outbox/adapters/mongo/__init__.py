"""MongoDB adapters on pymongo's native async API (``pymongo.AsyncMongoClient``).

``open_stores`` is this package's factory (the runtime picks it by name); it takes plain
settings, never the service configuration."""

from __future__ import annotations

from board_outbox.adapters.mongo.cards import MongoBoard
from board_outbox.adapters.mongo.changefeed import MongoChangeFeed
from board_outbox.adapters.mongo.client import make_client, mongo_stores, open_stores
from board_outbox.adapters.mongo.cursors import MongoCursorStore
from board_outbox.adapters.mongo.events import MongoEventLog
from board_outbox.adapters.mongo.limits import MongoLimitStore
from board_outbox.adapters.mongo.membership import MongoMembershipStore
from board_outbox.adapters.mongo.outbox import MongoEffectOutbox
from board_outbox.adapters.mongo.pauses import MongoPauseStore
from board_outbox.adapters.mongo.readmodels import MongoReadModelStore
from board_outbox.adapters.mongo.schema import ensure_schema
from board_outbox.adapters.mongo.series import MongoSeriesStore
from board_outbox.adapters.mongo.subscriptions import MongoSubscriptionStore
from board_outbox.adapters.mongo.tokens import MongoResumeTokenStore

__all__ = [
    "MongoBoard",
    "MongoChangeFeed",
    "MongoCursorStore",
    "MongoEffectOutbox",
    "MongoEventLog",
    "MongoLimitStore",
    "MongoMembershipStore",
    "MongoPauseStore",
    "MongoReadModelStore",
    "MongoResumeTokenStore",
    "MongoSeriesStore",
    "MongoSubscriptionStore",
    "ensure_schema",
    "make_client",
    "mongo_stores",
    "open_stores",
]
