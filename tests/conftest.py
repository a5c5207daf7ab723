from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest

from tests.support.kits import Kit, memory_kit, mongo_kit
from tests.support.live_mongo import SKIP_REASON, LiveServer, live_kind, live_server

# every async test runs under an anyio deadline shorter than its timeout (issue 21)
pytest_plugins = ["tests.support.deadline"]

BACKENDS = [
    "memory",
    "mongomock",
    pytest.param("mongo-live", marks=pytest.mark.live_mongo),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _ops_endpoints_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run`` serves /healthz, /readyz, /metrics on 127.0.0.1:9464 by default (O1): tests turn
    them off unless they ask for a port, so no test depends on 9464 being free."""
    monkeypatch.setenv("BOARD_OUTBOX_SERVICE__HTTP_PORT", "0")


@pytest.fixture(autouse=True)
def _logging_left_as_found() -> Iterator[None]:
    """A test that runs the CLI (``setup_logging``) or the harness (``quiet``) changes process-wide
    logging; under xdist the next test in the same worker would inherit it. Undo both."""
    from board_outbox.service.logs import StderrHandler

    root, ours = logging.getLogger(), logging.getLogger("board_outbox")
    root_level, ours_level = root.level, ours.level
    yield
    for h in [h for h in root.handlers if isinstance(h, StderrHandler)]:
        root.removeHandler(h)
    root.setLevel(root_level)
    ours.setLevel(ours_level)


_LIVE: dict[str, object] = {}


def _live_wanted(config: pytest.Config) -> bool:
    expr = config.getoption("markexpr", "") or ""
    return live_kind() is not None and "not live_mongo" not in expr


def _xdist_workers(config: pytest.Config) -> int:
    """How many pytest-xdist workers this (controller) process hands the tests to; 0 in a
    worker and in a plain run."""
    if hasattr(config, "workerinput"):
        return 0
    n = getattr(config.option, "numprocesses", None)
    return n if isinstance(n, int) else 0


def pytest_configure(config: pytest.Config) -> None:
    """Start the wire server once per session, before the header is printed, so the header can
    name it (SPEC W1). A run that deselects the live tests starts nothing. Under pytest-xdist
    each worker starts its own server (failpoints and restarts stay within one worker) and the
    controller, which runs no test, starts none."""
    if not _live_wanted(config):
        return
    workers = _xdist_workers(config)
    if workers:
        kind = live_kind()
        where = ("shared by" if kind == "MONGODB_URI" else "one server started by each of")
        _LIVE["desc"] = (f"via {kind}, {where} the {workers} test workers (a worker whose "
                         "server does not start fails its live tests with the reason)")
        return
    cm = live_server()
    try:
        live = cm.__enter__()
        _LIVE["cm"], _LIVE["server"], _LIVE["desc"] = cm, live, live.describe()
    except Exception as exc:  # the header and every live test say why
        _LIVE["error"] = f"{type(exc).__name__}: {exc}"
    output = getattr(config, "workeroutput", None)
    if output is not None:  # an xdist worker: the controller names this worker's server
        output["live_server"] = _LIVE.get("desc") or f"did not start: {_LIVE.get('error')}"
        output["live_worker"] = getattr(config, "workerinput", {}).get("workerid", "?")


_WORKER_SERVERS: dict[str, str] = {}


def pytest_testnodedown(node: object, error: object) -> None:
    """pytest-xdist (controller): a worker finished; keep what its wire server was."""
    out = getattr(node, "workeroutput", {}) or {}
    if "live_server" in out:
        _WORKER_SERVERS[str(out.get("live_worker", "?"))] = str(out["live_server"])


def pytest_unconfigure(config: pytest.Config) -> None:
    cm = _LIVE.pop("cm", None)
    if cm is not None:
        cm.__exit__(None, None, None)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def live() -> LiveServer:
    server = _LIVE.get("server")
    if server is None:
        if "error" in _LIVE:
            pytest.fail(f"the wire server did not start: {_LIVE['error']}")
        pytest.skip(SKIP_REASON)
    assert isinstance(server, LiveServer)
    return server


@pytest.fixture(scope="session")
def live_uri(live: LiveServer) -> str:
    return live.uri


@asynccontextmanager
async def live_database(uri: str) -> AsyncIterator[object]:
    """A fresh database on the real replica set, with the schema, dropped afterwards."""
    from pymongo import AsyncMongoClient

    from board_outbox.adapters.mongo import ensure_schema

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
        from board_outbox.adapters.mongo import ensure_schema
        from tests.support.mongomock_async import mock_database

        db = mock_database()
        await ensure_schema(db)
        yield mongo_kit(db, "mongomock")
    else:
        uri = request.getfixturevalue("live_uri")  # sync, session-scoped: skips with the reason
        async with live_database(uri) as db:
            yield mongo_kit(db, "mongo-live")


def pytest_report_header(config: pytest.Config) -> str:
    if "desc" in _LIVE:
        return f"live MongoDB-wire tests: ON - {_LIVE['desc']}"
    if "error" in _LIVE:
        return f"live MongoDB-wire tests: FAILING - the server did not start: {_LIVE['error']}"
    if live_kind() is not None:
        return "live MongoDB-wire tests: deselected by -m"
    return f"live MongoDB-wire tests: SKIPPED - {SKIP_REASON}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Name each xdist worker's wire server (the header could not: the workers start them), and
    say once, loudly, how many live-Mongo tests were skipped and why."""
    for worker, desc in sorted(_WORKER_SERVERS.items()):
        terminalreporter.write_line(f"live MongoDB-wire server of {worker}: {desc}")
    for reason, n in skip_reasons(terminalreporter.stats.get("skipped", [])).items():
        terminalreporter.write_line(f"{n} skipped: {reason}", yellow=True, bold=True)


def skip_reasons(reports: list[pytest.TestReport]) -> dict[str, int]:
    """How many tests skipped for each reason, the reason as the skip gave it (a browser test
    that skips for want of chromium says so, not that there is no wire server)."""
    out: dict[str, int] = {}
    for r in reports:
        longrepr = getattr(r, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        out[reason] = out.get(reason, 0) + 1
    return out
