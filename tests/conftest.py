from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.kits import Kit, memory_kit

BACKENDS = ["memory"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=BACKENDS)
async def kit(request: pytest.FixtureRequest) -> AsyncIterator[Kit]:
    if request.param == "memory":
        yield memory_kit()
    else:  # pragma: no cover
        raise AssertionError(request.param)

