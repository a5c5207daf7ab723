"""The production wiring: an ``AsyncMongoClient`` and every Mongo adapter over one database."""

from __future__ import annotations

import re
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypedDict, Unpack

import pymongo
from pymongo import AsyncMongoClient
from pymongo.errors import (
    ConfigurationError,
    InvalidURI,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
)

from board_outbox.adapters.mongo.api_tokens import MongoApiTokenStore
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
from board_outbox.model.bad_documents import cap
from board_outbox.model.errors import ConfigError, StoreError, StoreUnavailable
from board_outbox.model.retention import Retention
from board_outbox.ports import Launcher, Stores

SERVER_SELECTION_TIMEOUT_SECONDS = 10.0  # the default: how long opening waits for a primary


class ClientOptions(TypedDict, total=False):
    """``make_client``'s settings beside the URI, each optional (its default is there): what
    ``open_stores`` takes and passes on, spelt once."""

    app_name: str
    op_timeout_seconds: float
    connect_timeout_seconds: float
    server_selection_timeout_seconds: float
    read_concern: str
    write_concern: str | int


def make_client(
    uri: str,
    *,
    app_name: str = "board-outbox",
    op_timeout_seconds: float = 10.0,
    connect_timeout_seconds: float = 5.0,
    server_selection_timeout_seconds: float = SERVER_SELECTION_TIMEOUT_SECONDS,
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
    subs = MongoSubscriptionStore(db)
    return Stores(
        events=MongoEventLog(db),
        cursors=MongoCursorStore(db),
        outbox=MongoEffectOutbox(db),
        subs=subs,
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
        sub_admin=subs,
        api_tokens=MongoApiTokenStore(db),
    )


@asynccontextmanager
async def open_stores(
    *,
    launcher: Launcher,
    uri: str,
    database: str,
    change_feed: bool = True,
    ensure_schema: bool = False,
    retention: Retention | None = None,
    **options: Unpack[ClientOptions],
) -> AsyncIterator[Stores]:
    """The factory: connect (``make_client`` with ``options``; ``reach``: a primary answers
    within the server selection timeout, or one line says why not), optionally ensure the
    indexes and the retention's TTLs (O8), yield the ports, close."""
    client = make_client(uri, **options)
    try:
        timeout = options.get("server_selection_timeout_seconds", SERVER_SELECTION_TIMEOUT_SECONDS)
        await reach(client, timeout, seed_hosts(uri))
        db = client[database]
        if ensure_schema:
            await ensure(db, retention)
        yield mongo_stores(db, launcher, change_feed=change_feed)
    finally:
        await client.close()


def seed_hosts(uri: str) -> str:
    """The hosts ``uri`` names, without its credentials or options (for a message)."""
    m = re.match(r"^mongodb(\+srv)?://(?:[^@/]*@)?([^/?]*)", uri)
    return m.group(2) if m and m.group(2) else "?"


async def reach(client: AsyncMongoClient[dict[str, Any]], timeout: float, hosts: str) -> None:
    """One ``ping`` to a primary, bounded by ``timeout`` (the server selection timeout: how long
    opening the store waits for the replica set; each later operation has the op timeout). A
    store that does not answer is one line (``unreachable``), never pymongo's topology dump."""
    try:
        with pymongo.timeout(timeout):
            await client.admin.command("ping")
    except PyMongoError as exc:
        raise unreachable(client, exc, timeout, hosts) from None


_CAUSES = (  # what a connection error says -> the cause in words
    (re.compile(r"Errno 111|Connection refused|Connect call failed", re.I), "connection refused"),
    (re.compile(r"Name or service not known|nodename nor servname|getaddrinfo|Errno -[235]\b|"
                r"No address associated", re.I), "the host name does not resolve"),
    (re.compile(r"timed out|Errno 110", re.I), "the connection timed out"),
    (re.compile(r"Errno 113|No route to host|Network is unreachable|Errno 101", re.I),
     "no route to the host"),
    (re.compile(r"SSL|TLS|certificate", re.I), "the TLS handshake failed"),
)
_NOISE = re.compile(r"\s*\(configured timeouts:[^)]*\)")


def _cause(error: object) -> str:
    text = _NOISE.sub("", str(error))
    for pattern, words in _CAUSES:
        if pattern.search(text):
            return f"{words} ({cap(text, 160)})" if words.startswith("the TLS") else words
    return cap(text, 200)


def unreachable(client: AsyncMongoClient[dict[str, Any]], exc: PyMongoError,
                timeout: float, hosts: str) -> StoreUnavailable | StoreError:
    """``exc`` from the first contact, as one line: the hosts, the cause, what to check."""
    if isinstance(exc, OperationFailure):  # the server answered: it refused us
        if exc.code in (18, 11, 13):  # AuthenticationFailed, UserNotFound, Unauthorized
            return StoreError(f"the store at {hosts} refused the login ({cap(str(exc), 120)}): "
                              "check the user, the password and authSource in store.uri")
        return StoreError(f"the store at {hosts} refused a ping: {cap(str(exc), 200)}")
    if not isinstance(exc, ServerSelectionTimeoutError):
        return StoreUnavailable(f"the store at {hosts} did not answer within {timeout:g} s: "
                                f"{type(exc).__name__}: {_cause(exc)}")
    topology = client.topology_description
    servers = topology.server_descriptions()
    errors = [sd.error for sd in servers.values() if sd.error is not None]
    if errors:
        why = _cause(errors[0])
        check = ("check store.uri's host and port, that the server runs and listens there, and "
                 "that this host may reach it (a firewall, TLS options)")
    elif not servers:
        set_name = topology.replica_set_name
        why = (f"no member of replica set {set_name!r} answered: the servers there belong to "
               "another replica set, or are standalone" if set_name else "no server answered")
        check = "check replicaSet= in store.uri against the server's rs.status() set name"
    else:
        kinds = ", ".join(sorted({sd.server_type_name for sd in servers.values()}))
        why = f"no primary ({kinds}): an election in progress, or too few members up"
        check = "check the replica set's rs.status(), or wait for the election"
    return StoreUnavailable(f"cannot reach the store at {hosts} within {timeout:g} s "
                            f"(store.server_selection_timeout_seconds): {why}; {check}")
