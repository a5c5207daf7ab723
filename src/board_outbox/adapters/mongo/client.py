"""The production wiring: an ``AsyncMongoClient`` and every Mongo adapter over one database."""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.errors import ConfigurationError, InvalidURI, PyMongoError

from board_outbox.adapters.mongo.cards import MongoBoard
from board_outbox.adapters.mongo.changefeed import MongoChangeFeed
from board_outbox.adapters.mongo.cursors import MongoCursorStore
from board_outbox.adapters.mongo.events import MongoEventLog
from board_outbox.adapters.mongo.generations import MongoGenerationStore
from board_outbox.adapters.mongo.limits import MongoLimitStore
from board_outbox.adapters.mongo.membership import MongoMembershipStore
from board_outbox.adapters.mongo.outbox import MongoEffectOutbox
from board_outbox.adapters.mongo.pauses import MongoPauseStore
from board_outbox.adapters.mongo.readmodels import MongoReadModelStore
from board_outbox.adapters.mongo.schema import ensure_schema as ensure
from board_outbox.adapters.mongo.series import MongoSeriesStore
from board_outbox.adapters.mongo.sessions import MongoSessionStore
from board_outbox.adapters.mongo.status import MongoStatusStore
from board_outbox.adapters.mongo.subscriptions import MongoSubscriptionStore
from board_outbox.adapters.mongo.tokens import MongoResumeTokenStore
from board_outbox.model.errors import ConfigError
from board_outbox.ports import Launcher, Stores


def make_client(
    uri: str,
    *,
    app_name: str = "board-outbox",
    op_timeout_seconds: float = 10.0,
    connect_timeout_seconds: float = 5.0,
    server_selection_timeout_seconds: float = 10.0,
    read_concern: str = "majority",
    write_concern: str | int = "majority",
) -> AsyncMongoClient[dict[str, Any]]:
    """TLS, auth and replica-set options travel in the URI and reach pymongo untouched. An option
    pymongo only warns about (a typo such as ``tlss=true``, a value such as ``tls=maybe``) is an
    error here (R3): ignoring it would silently run without TLS. The read and write concerns are
    explicit (O5): with "majority", the tail never materializes an event an election could roll
    back, and a cursor advance, a row or a mark it was told is written cannot be rolled back."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            return _client(uri, app_name, op_timeout_seconds, connect_timeout_seconds,
                           server_selection_timeout_seconds, read_concern, write_concern)
    except UserWarning as exc:
        raise ConfigError(f"store.uri: {exc}") from None
    except (InvalidURI, ConfigurationError) as exc:
        raise ConfigError(f"store.uri: {exc}") from None
    except OSError as exc:  # a tlsCAFile / tlsCertificateKeyFile that cannot be read
        raise ConfigError(f"store.uri: {exc.strerror or exc}") from None
    except (PyMongoError, ValueError, TypeError) as exc:
        raise ConfigError(f"store: {exc}") from None


def _client(
    uri: str, app_name: str, op_timeout_seconds: float, connect_timeout_seconds: float,
    server_selection_timeout_seconds: float, read_concern: str, write_concern: str | int,
) -> AsyncMongoClient[dict[str, Any]]:
    return AsyncMongoClient(
        uri,
        tz_aware=True,
        # R7: a stored date no datetime holds (past 9999) decodes as a DatetimeMS, which its
        # document's decode refuses -- that document alone, not the read it came in
        datetime_conversion="DATETIME_AUTO",
        appname=app_name,
        timeoutMS=int(op_timeout_seconds * 1000),
        connectTimeoutMS=int(connect_timeout_seconds * 1000),
        serverSelectionTimeoutMS=int(server_selection_timeout_seconds * 1000),
        retryWrites=True,
        retryReads=True,
        readConcernLevel=read_concern,
        w=write_concern,
    )


def mongo_stores(db: Any, launcher: Launcher, *, change_feed: bool = True) -> Stores:
    """Every Mongo adapter over an open database."""
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
        members=MongoMembershipStore(db),
        rm_versions=MongoGenerationStore(db),
        status=MongoStatusStore(db),
        limits=MongoLimitStore(db),
        sessions=MongoSessionStore(db),
        pauses=MongoPauseStore(db),
        series=MongoSeriesStore(db),
    )


@asynccontextmanager
async def open_stores(
    *,
    launcher: Launcher,
    uri: str,
    database: str,
    app_name: str = "board-outbox",
    op_timeout_seconds: float = 10.0,
    connect_timeout_seconds: float = 5.0,
    server_selection_timeout_seconds: float = 10.0,
    read_concern: str = "majority",
    write_concern: str | int = "majority",
    change_feed: bool = True,
    ensure_schema: bool = False,
) -> AsyncIterator[Stores]:
    """The factory: connect, optionally ensure the indexes, yield the ports, close."""
    client = make_client(
        uri, app_name=app_name, op_timeout_seconds=op_timeout_seconds,
        connect_timeout_seconds=connect_timeout_seconds,
        server_selection_timeout_seconds=server_selection_timeout_seconds,
        read_concern=read_concern, write_concern=write_concern,
    )
    try:
        db = client[database]
        if ensure_schema:
            await ensure(db)
        yield mongo_stores(db, launcher, change_feed=change_feed)
    finally:
        await client.close()
