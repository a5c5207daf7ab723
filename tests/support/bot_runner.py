"""A bot runner over HTTP for a ``board-outbox run`` child process (``launcher.kind = "http"``):
each POST is one launch, counted on the runner's side by its ``Idempotency-Key`` header (the row
key), answered 200 after the bot's delay. What a real bot would see: a key launched twice, or a
row launched that should never have been. ``hold`` stalls every launch (counted, unanswered)
until ``go``: the service's claims then stop where they are, whatever the machine's load."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


class CountingBots:
    """``delays``: seconds each bot's launch takes (by the request's ``bot``; others answer at
    once). ``launched``: row key -> launches; ``at``: row key -> when the first one began. A
    launch held waits at most ``hold_seconds`` for ``go``."""

    def __init__(self, delays: Mapping[str, float] | None = None,
                 hold_seconds: float = 60.0) -> None:
        self.delays = dict(delays or {})
        self.hold_seconds = hold_seconds
        self.open = threading.Event()
        self.open.set()
        self.lock = threading.Lock()
        self.launched: Counter[str] = Counter()
        self.at: dict[str, float] = {}
        bots = self

        class Launch(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                key = self.headers["Idempotency-Key"]
                with bots.lock:
                    bots.launched[key] += 1
                    bots.at.setdefault(key, time.time())
                bots.open.wait(bots.hold_seconds)
                time.sleep(bots.delays.get(req.get("bot", ""), 0.0))
                body = json.dumps({"launch_id": f"run-{key}"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Launch)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/launch"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def hold(self) -> None:
        """Launches from now on wait (counted) until ``go``."""
        self.open.clear()

    def go(self) -> None:
        self.open.set()

    def counts(self, prefix: str = "") -> Counter[str]:
        """The launches of the row keys starting with ``prefix``, as of now."""
        with self.lock:
            return Counter({k: n for k, n in self.launched.items() if k.startswith(prefix)})

    def close(self) -> None:
        self.go()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> CountingBots:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
