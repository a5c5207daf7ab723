from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec
import pytest

from board_outbox.adapters.launchers import HttpLauncher, LogLauncher
from board_outbox.model.errors import LaunchFailed, PermanentEffectError
from board_outbox.ports import LaunchRequest

pytestmark = pytest.mark.anyio
REQ = LaunchRequest(tenant_id="t", bot="b", card_id="c", sub_id="s", seq=1, row_key="t/1/sub/s")


@pytest.fixture
def bot_runner() -> Iterator[tuple[str, list[tuple[dict[str, object], str]], list[int]]]:
    got: list[tuple[dict[str, object], str]] = []
    statuses: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((msgspec.json.decode(body), self.headers["Idempotency-Key"]))
            status = statuses.pop(0) if statuses else 200
            payload = b'{"launch_id": "L-1"}' if status == 200 else b""
            self.send_response(status)
            if 300 <= status < 400:  # back to the same endpoint: a client that follows loops
                self.send_header("Location", self.path)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/launch", got, statuses
    server.shutdown()
    server.server_close()


async def test_http_launcher_posts_json_with_idempotency_key(bot_runner: tuple) -> None:  # type: ignore[type-arg]
    url, got, statuses = bot_runner
    launcher = HttpLauncher(url)
    try:
        assert await launcher.launch(REQ) == "L-1"
        assert got == [({"tenant_id": "t", "bot": "b", "card_id": "c", "sub_id": "s", "seq": 1,
                         "row_key": "t/1/sub/s"}, "t/1/sub/s")]
        statuses[:] = [503, 429, 400]
        with pytest.raises(LaunchFailed, match="503"):
            await launcher.launch(REQ)
        with pytest.raises(LaunchFailed, match="429"):
            await launcher.launch(REQ)
        with pytest.raises(PermanentEffectError, match="400"):
            await launcher.launch(REQ)
    finally:
        await launcher.aclose()


async def test_a_redirect_is_not_followed_but_retried(bot_runner: tuple) -> None:  # type: ignore[type-arg]
    """A 3xx is a misconfigured runner URL: the launch is retried, never re-sent elsewhere."""
    url, got, statuses = bot_runner
    statuses[:] = [302]
    launcher = HttpLauncher(url)
    try:
        with pytest.raises(LaunchFailed, match=r"302 .*not followed"):
            await launcher.launch(REQ)
    finally:
        await launcher.aclose()
    assert len(got) == 1  # one POST: the redirect was not chased


async def test_unreachable_bot_runner_is_retried() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launcher = HttpLauncher(f"http://127.0.0.1:{port}/launch", timeout_seconds=2)
    try:
        with pytest.raises(LaunchFailed, match="unreachable"):
            await launcher.launch(REQ)
    finally:
        await launcher.aclose()


async def test_log_launcher_logs(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    with caplog.at_level(logging.INFO, logger="board_outbox.launcher"):
        lid = await LogLauncher().launch(REQ)
    assert lid and any(getattr(r, "row_key", None) == "t/1/sub/s" for r in caplog.records)
