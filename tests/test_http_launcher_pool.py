"""The HTTP launcher on httpx.AsyncClient (issue 12, item 6): one pooled, keep-alive client with
timeouts, no thread per launch."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import pytest

from board_outbox.adapters.launchers import HttpLauncher
from board_outbox.model.errors import LaunchFailed
from board_outbox.ports import LaunchRequest

pytestmark = pytest.mark.anyio


def req(i: int) -> LaunchRequest:
    return LaunchRequest(tenant_id="t", bot="b", card_id="c", sub_id="s", seq=i, row_key=f"t/{i}/sub/s")


@pytest.fixture
def keepalive_runner() -> Iterator[tuple[str, set[int]]]:
    peers: set[int] = set()  # client ports seen: one per connection

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            peers.add(self.client_address[1])
            body = b'{"launch_id": "L"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/launch", peers
    server.shutdown()
    server.server_close()


async def test_launches_share_pooled_keepalive_connections(
    keepalive_runner: tuple[str, set[int]],
) -> None:
    url, peers = keepalive_runner
    launcher = HttpLauncher(url, max_connections=4)
    try:
        async with anyio.create_task_group() as tg:
            for i in range(40):
                tg.start_soon(launcher.launch, req(i))
        for i in range(10):
            assert await launcher.launch(req(100 + i)) == "L"
    finally:
        await launcher.aclose()
    assert 1 <= len(peers) <= 4  # 50 launches over at most max_connections connections


async def test_a_bot_runner_that_never_answers_times_out_as_a_retry() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # accepts (backlog), never answers
        port = silent.getsockname()[1]
        launcher = HttpLauncher(f"http://127.0.0.1:{port}/launch", timeout_seconds=0.5)
        try:
            with anyio.fail_after(5), pytest.raises(LaunchFailed, match="ReadTimeout"):
                await launcher.launch(req(1))
        finally:
            await launcher.aclose()


async def test_a_runner_that_hangs_up_or_answers_garbage_is_a_retry_or_an_accepted_launch() -> None:
    """Hostile runners: one that accepts and closes the connection without a word is a retry
    (never a crash of the launcher); one answering 200 with a body that is not JSON is still a
    launch (the 2xx is what counts), with no launch id."""
    answers = iter([None, b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nnot json!"])

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]

        def serve() -> None:
            for answer in answers:
                conn, _ = srv.accept()
                with conn:
                    if answer is not None:
                        conn.recv(65536)
                        conn.sendall(answer)

        threading.Thread(target=serve, daemon=True).start()
        launcher = HttpLauncher(f"http://127.0.0.1:{port}/launch", timeout_seconds=5)
        try:
            with anyio.fail_after(10):
                with pytest.raises(LaunchFailed, match="unreachable"):
                    await launcher.launch(req(1))
                assert await launcher.launch(req(2)) == "accepted"
        finally:
            await launcher.aclose()
