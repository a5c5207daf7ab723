"""The production wiring: an ``AsyncMongoClient`` and every Mongo adapter over one database."""

from __future__ import annotations

from typing import Any

from pymongo import AsyncMongoClient
from pymongo.errors import ConfigurationError, InvalidURI, PyMongoError

from ..config import StoreConfig
from ..errors import ConfigError
from ..ports import Launcher
from ..runtime import Stores
from .board import MongoBoard, MongoReadModelStore, MongoSubscriptionStore
from .changefeed import MongoChangeFeed
from .cursors import MongoCursorStore, MongoResumeTokenStore
from .events import MongoEventLog
from .outbox import MongoEffectOutbox


def make_client(cfg: StoreConfig) -> AsyncMongoClient[dict[str, Any]]:
    """TLS, auth and replica-set options travel in the URI and reach pymongo untouched."""
    try:
        return AsyncMongoClient(
            cfg.uri,
            tz_aware=True,
            appname=cfg.app_name,
            timeoutMS=int(cfg.op_timeout_seconds * 1000),
            connectTimeoutMS=int(cfg.connect_timeout_seconds * 1000),
            serverSelectionTimeoutMS=int(cfg.server_selection_timeout_seconds * 1000),
            retryWrites=True,
            retryReads=True,
        )
    except (InvalidURI, ConfigurationError) as exc:
        raise ConfigError(f"store.uri: {exc}") from None
    except (PyMongoError, ValueError, TypeError) as exc:
        raise ConfigError(f"store: {exc}") from None


def mongo_stores(db: Any, launcher: Launcher, *, change_feed: bool = True) -> Stores:
    board = MongoBoard(db)
    return Stores(
        events=MongoEventLog(db),
        cursors=MongoCursorStore(db),
        outbox=MongoEffectOutbox(db),
        subs=MongoSubscriptionStore(db),
        cards=board,
        labels=board,
        launcher=launcher,
        readmodels=MongoReadModelStore(db),
        feed=MongoChangeFeed(db) if change_feed else None,
        tokens=MongoResumeTokenStore(db),
    )
