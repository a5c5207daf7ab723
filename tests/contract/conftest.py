"""Fixtures of the contract suite beyond ``kit`` (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.conftest import live_database
from tests.support.kits import Kit, mongo_kit


@pytest.fixture(params=["mongomock", pytest.param("mongo-live", marks=pytest.mark.live_mongo)])
async def mongo(request: pytest.FixtureRequest) -> AsyncIterator[Kit]:
    """The kit of the Mongo adapters only (mongomock, the wire): for what only they have."""
    if request.param == "mongomock":
        from board_outbox.adapters.mongo import ensure_schema
        from tests.support.mongomock_async import mock_database

        db = mock_database()
        await ensure_schema(db)
        yield mongo_kit(db, "mongomock")
    else:
        uri = request.getfixturevalue("live_uri")
        async with live_database(uri) as db:
            yield mongo_kit(db, "mongo-live")
