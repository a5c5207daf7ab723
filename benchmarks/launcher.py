"""Launches per second through ``HttpLauncher`` to a local bot runner (issue 12, item 6).

The bot runner is a separate process (a threading HTTP/1.1 server with keep-alive, answering
200 ``{"launch_id": ...}`` at once), so the numbers are the launcher's own cost: connections,
threads, encoding. ``concurrency`` launches are in flight at a time, as a worker batch with
several tenants would have them.

    .venv/bin/python -m benchmarks.launcher [--launches 3000] [--concurrency 1,16]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from typing import Any

import anyio
import anyio.to_thread
import msgspec

from board_outbox.adapters.launchers import HttpLauncher
from board_outbox.ports import LaunchRequest

RUNNER = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b'{"launch_id": "L"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
ThreadingHTTPServer.request_queue_size = 256
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
s.daemon_threads = True
print(s.server_address[1], flush=True)
s.serve_forever()
"""


async def measure(launcher: HttpLauncher, launches: int, concurrency: int) -> float:
    reqs = [LaunchRequest(tenant_id="t", bot="b", card_id="c", sub_id="s", seq=i,
                          row_key=f"t/{i}/sub/s") for i in range(launches)]
    it = iter(reqs)

    async def lane() -> None:
        for req in it:
            await launcher.launch(req)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(lane)
    return launches / (time.perf_counter() - start)


class UrllibThreadLauncher:
    """The launcher before issue 12 (a worker thread and a fresh connection per launch), kept
    here as the baseline."""

    def __init__(self, url: str, timeout_seconds: float = 10.0) -> None:
        self.url, self.timeout = url, timeout_seconds

    async def launch(self, req: LaunchRequest) -> str:
        body = msgspec.json.encode(req)
        return await anyio.to_thread.run_sync(self._post, body, req.row_key)

    def _post(self, body: bytes, row_key: str) -> str:
        request = urllib.request.Request(self.url, data=body, method="POST", headers={
            "Content-Type": "application/json", "Idempotency-Key": row_key})
        with urllib.request.urlopen(request, timeout=self.timeout) as resp:
            return str(msgspec.json.decode(resp.read()).get("launch_id"))


async def main_async(launches: int, concurrency: list[int], rounds: int) -> dict[str, Any]:
    proc = subprocess.Popen([sys.executable, "-c", RUNNER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        url = f"http://127.0.0.1:{port}/launch"
        out: dict[str, Any] = {}
        # interleaved rounds, best of each: the machine is shared, so noise only ever slows
        for name, launcher in (("before: urllib, thread per launch", UrllibThreadLauncher(url)),
                               ("after: httpx.AsyncClient, pooled", HttpLauncher(url, 10.0))):
            await measure(launcher, 200, 4)  # warm-up
            res = out.setdefault(name, {})
            for _ in range(rounds):
                for c in concurrency:
                    rate = round(await measure(launcher, launches, c), 1)
                    res[f"concurrency={c}"] = max(res.get(f"concurrency={c}", 0.0), rate)
            aclose = getattr(launcher, "aclose", None)
            if aclose is not None:
                await aclose()
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=3000)
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    res = anyio.run(main_async, args.launches, [int(c) for c in args.concurrency.split(",")],
                    args.rounds)
    print(json.dumps({"launches_per_second": res}, indent=2))


if __name__ == "__main__":
    main()
