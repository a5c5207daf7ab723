"""A local bot runner that records when each launch arrives, and an OTLP/HTTP sink.

One aiohttp server in its own process on 127.0.0.1 (its CPU is nobody's under test):

- ``POST /launch``: the launch request (``LaunchRequest`` as JSON, or the floor's own body with
  the same ``tenant_id``, ``seq`` and ``row_key``); its arrival time (``time.time()`` as the
  handler starts, the request's head and body already read by the server) is recorded, and the
  answer is ``{"launch_id": ...}`` at once;
- ``GET /arrivals``: the arrivals since the last ``GET /arrivals?clear=1`` as JSON rows
  ``[time, tenant_id, seq, row_key]``;
- ``POST /v1/traces`` and ``POST /v1/metrics``: the OTLP/HTTP exporters' requests (read and
  dropped, 200), so that a ``board-outbox run`` with telemetry on exports somewhere real.

``python -m benchmarks.runner`` prints its port on one line and serves until SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Arrival:
    at: float
    tenant_id: str
    seq: int
    row_key: str


class Recorder:
    def __init__(self) -> None:
        self.arrivals: list[tuple[float, str, int, str]] = []
        self.otlp_bytes = 0

    async def launch(self, request: web.Request) -> web.Response:
        at = time.time()
        doc = json.loads(await request.read())
        self.arrivals.append((at, str(doc.get("tenant_id")), int(doc.get("seq", -1)),
                              str(doc.get("row_key"))))
        return web.json_response({"launch_id": f"L{len(self.arrivals)}"})

    async def listing(self, request: web.Request) -> web.Response:
        out = web.json_response({"arrivals": self.arrivals, "otlp_bytes": self.otlp_bytes})
        if request.query.get("clear"):
            self.arrivals = []
        return out

    async def otlp(self, request: web.Request) -> web.Response:
        self.otlp_bytes += len(await request.read())
        return web.Response(body=b"", content_type="application/x-protobuf")


async def serve() -> None:
    rec = Recorder()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/launch", rec.launch)
    app.router.add_get("/arrivals", rec.listing)
    app.router.add_post("/v1/traces", rec.otlp)
    app.router.add_post("/v1/metrics", rec.otlp)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)
    await web.SockSite(runner, sock).start()
    print(sock.getsockname()[1], flush=True)
    done = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, done.set)
    await done.wait()
    await runner.cleanup()


class RunnerClient:
    """The benchmark's side: the URLs to give the pipelines, and the arrivals read back."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.launch_url = f"{self.base}/launch"

    def arrivals(self, clear: bool = False) -> tuple[list[Arrival], int]:
        """(the arrivals recorded since the last clear, the OTLP bytes received so far)"""
        url = f"{self.base}/arrivals" + ("?clear=1" if clear else "")
        with urllib.request.urlopen(url, timeout=30) as resp:
            doc: dict[str, Any] = json.loads(resp.read())
        return [Arrival(float(a), str(t), int(s), str(k)) for a, t, s, k in doc["arrivals"]], \
            int(doc["otlp_bytes"])


@contextmanager
def recording_runner() -> Iterator[RunnerClient]:
    """Start the runner process; yield its client; stop it."""
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.runner"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield RunnerClient(int(proc.stdout.readline()))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    asyncio.run(serve())
