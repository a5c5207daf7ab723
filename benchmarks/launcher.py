"""Our CPU per launch and launches per second through the HTTP launcher to a local bot runner
(the client chosen by measurement).

The bot runner is a separate process (a threading HTTP/1.1 server with keep-alive, answering
200 ``{"launch_id": ...}`` at once), so this process's CPU time (``time.process_time``) is the
launcher's own cost: connections, parsing, encoding. ``concurrency`` launches are in flight at a
time, as a worker batch with several tenants would have them. The clients are measured in
interleaved rounds in one run:

- ``aiohttp`` -- ``HttpLauncher`` as shipped (``aiohttp.ClientSession``, pooled keep-alive);
- ``httpx`` -- the same requests on a pooled ``httpx.AsyncClient`` (``trust_env=False``) with
  ``sniffio`` installed: httpcore's async-library detection fixed;
- ``httpx, no sniffio`` -- the same, with ``import sniffio`` failing as it does when sniffio is
  not installed (httpcore re-runs it per request): the launcher before aiohttp.

    .venv/bin/python -m benchmarks.launcher [--launches 2000] [--concurrency 1,16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from contextlib import contextmanager
from typing import Any, Protocol

import anyio
import httpx
import msgspec

from board_outbox.adapters.launchers import HttpLauncher
from board_outbox.model.errors import LaunchFailed
from board_outbox.ports import LaunchRequest

from .common import bot_runner, sniffio_absent, write_result


class Launcher(Protocol):
    async def launch(self, req: LaunchRequest) -> str: ...

    async def aclose(self) -> None: ...


class HttpxLauncher:
    """The launcher as it was before aiohttp: a pooled ``httpx.AsyncClient``, same headers,
    same per-phase timeouts, the same status rules (only the 2xx path is exercised here)."""

    def __init__(self, url: str, timeout_seconds: float = 10.0, max_connections: int = 32) -> None:
        self.url = url
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_seconds), trust_env=False,
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=max_connections))

    async def launch(self, req: LaunchRequest) -> str:
        body = msgspec.json.encode(req)
        resp = await self.client.post(self.url, content=body, headers={
            "Content-Type": "application/json", "Idempotency-Key": req.row_key})
        payload = await resp.aread()
        if resp.status_code >= 300:
            raise LaunchFailed(f"bot runner answered {resp.status_code}")
        return str(msgspec.json.decode(payload).get("launch_id"))

    async def aclose(self) -> None:
        await self.client.aclose()


async def measure(launcher: Launcher, launches: int, concurrency: int) -> tuple[float, float]:
    """(our CPU µs per launch, launches per second)"""
    reqs = [LaunchRequest(tenant_id="t", bot="b", card_id="c", sub_id="s", seq=i,
                          row_key=f"t/{i}/sub/s") for i in range(launches)]
    it = iter(reqs)

    async def lane() -> None:
        for req in it:
            await launcher.launch(req)

    cpu0, start = time.process_time(), time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(lane)
    return (time.process_time() - cpu0) * 1e6 / launches, launches / (time.perf_counter() - start)


async def main_async(launches: int, concurrency: list[int], rounds: int) -> dict[str, Any]:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # as service/logs.py sets it
    with bot_runner() as url:
        clients: dict[str, tuple[Launcher, bool]] = {
            "aiohttp": (HttpLauncher(url, 10.0), False),
            "httpx": (HttpxLauncher(url, 10.0), False),
            "httpx, no sniffio": (HttpxLauncher(url, 10.0), True),
        }
        samples: dict[str, dict[int, list[tuple[float, float]]]] = {k: {} for k in clients}
        for launcher, absent in clients.values():  # warm-up: connections, imports
            with sniffio_absent() if absent else _nothing():
                await measure(launcher, 200, 4)
        # interleaved rounds: the machine is shared, so each client sees the same noise
        for _ in range(rounds):
            for name, (launcher, absent) in clients.items():
                with sniffio_absent() if absent else _nothing():
                    for c in concurrency:
                        samples[name].setdefault(c, []).append(await measure(launcher, launches, c))
        for launcher, _absent in clients.values():
            await launcher.aclose()
        out: dict[str, Any] = {}
        for name, by_c in samples.items():
            out[name] = {f"concurrency={c}": {
                "cpu_us_per_launch": round(statistics.median(s[0] for s in runs), 1),
                "launches_per_s": round(statistics.median(s[1] for s in runs), 1),
                "rounds": len(runs)} for c, runs in by_c.items()}
        return out


@contextmanager
def _nothing() -> Any:
    yield


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=2000)
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    res = anyio.run(main_async, args.launches, [int(c) for c in args.concurrency.split(",")],
                    args.rounds)
    path = write_result("launcher", {"launches": args.launches, "rounds": args.rounds,
                                     "unit": "median over rounds", "results": res})
    print(json.dumps(res, indent=2))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
