from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest

from tests.support.kits import Kit, memory_kit, mongo_kit
from tests.support.live_mongo import SKIP_REASON, live_available, replica_set

BACKENDS = [
    "memory",
    "mongomock",
    pytest.param("mongo-live", marks=pytest.mark.live_mongo),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def live_uri() -> Iterator[str]:
    if not live_available():
        pytest.skip(SKIP_REASON)
    with replica_set() as uri:
        yield uri


@asynccontextmanager
async def live_database(uri: str) -> AsyncIterator[object]:
    """A fresh database on the real replica set, with the schema, dropped afterwards."""
    from pymongo import AsyncMongoClient

    from board_outbox.mongo import ensure_schema

    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(uri, tz_aware=True)
    name = f"board_outbox_test_{uuid.uuid4().hex[:10]}"
    db = client[name]
    await ensure_schema(db)
    try:
        yield db
    finally:
        await client.drop_database(name)
        await client.close()


@pytest.fixture
async def live_db(live_uri: str) -> AsyncIterator[object]:
    async with live_database(live_uri) as db:
        yield db


@pytest.fixture(params=BACKENDS)
async def kit(request: pytest.FixtureRequest) -> AsyncIterator[Kit]:
    if request.param == "memory":
        yield memory_kit()
    elif request.param == "mongomock":
        from board_outbox.mongo import ensure_schema
        from tests.support.mongomock_async import mock_database

        db = mock_database()
        await ensure_schema(db)
        yield mongo_kit(db, "mongomock")
    else:
        uri = request.getfixturevalue("live_uri")  # sync, session-scoped: skips with the reason
        async with live_database(uri) as db:
            yield mongo_kit(db, "mongo-live")


def pytest_report_header(config: pytest.Config) -> str:
    if live_available():
        return "live MongoDB tests: ON (MONGODB_URI or mongod on PATH)"
    return f"live MongoDB tests: SKIPPED - {SKIP_REASON}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say once, loudly, how many live-Mongo tests were skipped and why."""
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if "live_mongo" in getattr(r, "keywords", {})]
    if skipped:
        terminalreporter.write_line(
            f"{len(skipped)} live MongoDB tests skipped: {SKIP_REASON}", yellow=True, bold=True)
