"""A small TLS-terminating reverse proxy for the browser test (U3), as an operator puts nginx,
Traefik or an SSO proxy in front of the console: https on a self-signed certificate made for
the test (``openssl``), plain http to the upstream from its own source address, and on every
request ``X-Forwarded-For`` (appended), ``X-Forwarded-Proto: https``, ``X-Forwarded-Host`` and
the signed-in operator's name in an identity header (set, replacing any copy the client sent).
aiohttp's server and client, on an event loop of its own in a thread."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import threading
from pathlib import Path

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

# not forwarded either way (RFC 9110, 7.6.1), nor what aiohttp recomputes
HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer",
                 "transfer-encoding", "upgrade", "host", "content-length"})


def self_signed(where: Path) -> tuple[Path, Path] | None:
    """A certificate for ``localhost`` and 127.0.0.1 and its key; None without ``openssl``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = where / "proxy-cert.pem", where / "proxy-key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=30)
    return cert, key


class TlsProxy:
    """``https://localhost:<port>`` in front of ``upstream`` (``http://host:port``)."""

    def __init__(self, upstream: str, cert: Path, key: Path, identity: tuple[str, str],
                 source: str = "127.0.0.2") -> None:
        self.upstream, self.identity, self.source = upstream.rstrip("/"), identity, source
        self.requests = 0
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.loop = asyncio.new_event_loop()
        started: asyncio.Future[int] = self.loop.create_future()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self._start(ctx, started))
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, name="tls-proxy", daemon=True)
        self.thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._port(started), self.loop).result(30)
        self.url = f"https://localhost:{self.port}"

    @staticmethod
    async def _port(started: asyncio.Future[int]) -> int:
        return await started

    async def _start(self, ctx: ssl.SSLContext, started: asyncio.Future[int]) -> None:
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(local_addr=(self.source, 0)), auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=30))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.forward)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=ctx).start()
        started.set_result(int(self.runner.addresses[0][1]))

    async def forward(self, request: web.Request) -> web.Response:
        self.requests += 1
        name, value = self.identity
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower() not in HOP and k.lower() != name.lower())
        seen = request.headers.get("X-Forwarded-For")
        peer = request.remote or "unknown"
        headers["X-Forwarded-For"] = f"{seen}, {peer}" if seen else peer
        headers["X-Forwarded-Proto"] = "https"
        headers["X-Forwarded-Host"] = request.host
        headers[name] = value
        body = await request.read()
        async with self.session.request(request.method, self.upstream + request.raw_path,
                                        headers=headers, data=body or None,
                                        allow_redirects=False) as r:
            payload = await r.read()
            out = CIMultiDict((k, v) for k, v in r.headers.items() if k.lower() not in HOP)
            return web.Response(status=r.status, body=payload, headers=out)

    def close(self) -> None:
        async def stop() -> None:
            await self.runner.cleanup()
            await self.session.close()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
