"""The proof (C7, C5): one trace per event, from the producer to the bot, on the wire, over two
replicas, a retry, and a crash with its reclaim -- exported over OTLP by every process and
rebuilt from what the in-repo receiver got.

- the **producer** (this process, its own tracer provider) emits inside a request span;
- **replica A** (an in-process ``Service``, tracer provider of its own) materializes: its tail
  runs, its hand-off is off, so its rows are born pending;
- **replica B** is a real ``board-outbox run`` process exporting OTLP from the standard
  variables; its tail has no change stream and polls every 100 s, so A materializes every event
  and B's worker claims and launches them;
- the **bot runner** (an HTTP server in this process) starts its own span from each request's
  ``traceparent`` and exports it too.

Event 1: the bot answers 503, then 200 (a retry: two execute spans). Event 2: the bot holds B's
request while B is SIGKILLed; A reclaims the row once B's lease has expired and launches it.
Each row's tree, rebuilt by ``tracing.waterfall`` from the receiver's OTLP file, must be one
trace holding the producer's span, A's materialize span, every execute attempt, each HTTP
``POST`` and the bot's span, in that order, with the row key on each."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from board_outbox.adapters.launchers import HttpLauncher
from board_outbox.adapters.mongo import open_stores
from board_outbox.model.board import Card
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.producer import emit
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from tests.support.kits import mongo_kit
from tracing.otlp_receiver import SpanSink, http_receiver
from tracing.waterfall import EXECUTE, MATERIALIZE, SEND, Span, load, render_png, render_text, row_tree

pytestmark = [pytest.mark.anyio, pytest.mark.live_mongo, pytest.mark.timeout(150)]
ROOT = Path(__file__).resolve().parent.parent
TENANT = "acme"
SUB = "triage"
WORKER = {"lease_seconds": 2.0, "backoff_base_seconds": 0.2, "backoff_jitter": 0.0,
          "reclaim_every_seconds": 0.5, "idle_seconds": 0.05, "max_execution_seconds": 30.0}


def provider(endpoint: str, name: str, instance: str = "", batch: bool = False) -> TracerProvider:
    attrs = {"service.name": name, **({"service.instance.id": instance} if instance else {})}
    tp = TracerProvider(resource=Resource.create(attrs))
    exporter = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")
    tp.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100) if batch
                          else SimpleSpanProcessor(exporter))
    return tp


@dataclass
class Bot:
    """The bot runner: each request becomes a SERVER span continuing its ``traceparent``.
    ``script[row_key]``: what to answer, request by request (an int: that status; "hold": wait
    for ``release``, then 200); afterwards 200."""

    tp: TracerProvider
    script: dict[str, list[int | str]] = field(default_factory=dict)
    got: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def answer(self, key: str) -> int | str:
        steps = self.script.get(key) or []
        return steps.pop(0) if steps else 200

    def seen(self, key: str) -> int:
        return sum(1 for k, _ in self.got if k == key)


@contextmanager
def bot_runner(tp: TracerProvider) -> Iterator[Bot]:
    bot = Bot(tp)
    tracer = tp.get_tracer("test-bot")
    w3c = TraceContextTextMapPropagator()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            headers = {k.lower(): v for k, v in self.headers.items()}
            key = headers.get("idempotency-key", "")
            with tracer.start_as_current_span(
                "POST /launch", context=w3c.extract(headers), kind=SpanKind.SERVER,
                attributes={"board_outbox.row_key": key},
            ) as span:
                bot.got.append((key, headers))
                step = bot.answer(key)
                if step == "hold":
                    bot.release.wait(60)
                    step = 200
                span.set_attribute("http.response.status_code", int(step))
            payload = b'{"launch_id": "bot-1"}' if step == 200 else b""
            try:
                self.send_response(int(step))
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the caller died while we held its request

        def log_message(self, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    bot.url = f"http://127.0.0.1:{server.server_address[1]}/launch"
    try:
        yield bot
    finally:
        bot.release.set()
        server.shutdown()
        server.server_close()


def spawn_b(uri: str, db: str, bot: str, endpoint: str, tmp: Path) -> subprocess.Popen[bytes]:
    cfg = tmp / "b.toml"
    worker = "".join(f"{k} = {v}\n" for k, v in WORKER.items())
    cfg.write_text(
        f'projections = []\n[store]\nbackend = "mongo"\nuri = "{uri}"\ndatabase = "{db}"\n'
        '[service]\nreplica_name = "B"\nlog_format = "json"\nlog_level = "INFO"\nhttp_port = 0\n'
        '[tail]\nseed = "earliest"\nchange_streams = false\npoll_interval_seconds = 100\n'
        f'[worker]\n{worker}[launcher]\nkind = "http"\nurl = "{bot}"\ntimeout_seconds = 30\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
           "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
           "OTEL_BSP_SCHEDULE_DELAY": "100"}
    return subprocess.Popen([sys.executable, "-m", "board_outbox", "run", "--config", str(cfg)],
                            env=env, stdout=subprocess.DEVNULL,
                            stderr=open(tmp / "b.log", "wb"))


async def until(what: str, pred: Any, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        await anyio.sleep(0.05)


async def row_state(db: Any, key: str) -> str | None:
    doc = await db["trigger_effects"].find_one({"row_key": key}, {"state": 1})
    return None if doc is None else str(doc["state"])


def check_chain(tree: list[tuple[int, Span]], key: str, executes: list[tuple[str, int, str]],
                ) -> None:
    """The row's tree: the request, the producer's send, A's materialize, then each execute
    attempt (replica, attempt, outcome) with its POST and the bot's span under it."""
    spans = [s for _, s in tree]
    assert len({s.trace_id for s in spans}) == 1, render_text(tree, key)  # ONE trace
    event_id = key.rsplit("/sub/", 1)[0]
    request, send, mat = spans[:3]
    assert (request.name, request.service) == ("PATCH /cards", "board-app")
    assert (send.name, send.kind, send.service) == (SEND, "producer", "board-app")
    assert send.attributes["messaging.message.id"] == event_id  # the row key's event part
    assert (mat.name, mat.kind, mat.service) == (MATERIALIZE, "consumer", "board-outbox/A")
    assert mat.attributes["messaging.message.id"] == event_id
    assert key in mat.attributes["board_outbox.row_keys"]
    assert [d for d, _ in tree[:3]] == [0, 1, 2]
    rest = tree[3:]
    assert len(rest) == 3 * len(executes), render_text(tree, key)
    for i, (replica, attempt, outcome) in enumerate(executes):
        (d1, ex), (d2, post), (d3, bot) = rest[3 * i: 3 * i + 3]
        assert (d1, d2, d3) == (3, 4, 5)
        assert (ex.name, ex.kind, ex.service) == (EXECUTE, "consumer", f"board-outbox/{replica}")
        assert ex.attributes["board_outbox.attempt"] == attempt
        assert str(ex.attributes["board_outbox.outcome"]).startswith(outcome)
        assert (post.kind, post.service) == ("client", f"board-outbox/{replica}")
        assert post.attributes["http.request.method"] == "POST"
        assert (bot.name, bot.kind, bot.service) == ("POST /launch", "server", "test-bot")
        for s in (ex, post, bot):
            assert s.attributes["board_outbox.row_key"] == key
        assert ex.start_ns <= post.start_ns <= bot.start_ns <= bot.end_ns <= post.end_ns
    assert send.start_ns <= mat.start_ns <= rest[0][1].start_ns


async def test_one_trace_per_event_from_the_producer_to_the_bot(
    live_uri: str, live_db: Any, tmp_path: Path,
) -> None:
    sink = SpanSink(tmp_path / "spans.jsonl")
    with http_receiver(sink) as endpoint, bot_runner(provider(endpoint, "test-bot")) as bot:
        app = provider(endpoint, "board-app")
        tp_a = provider(endpoint, "board-outbox", "A", batch=True)
        kit = mongo_kit(live_db, "trace-wire")
        await kit.subs.put(Subscription(sub_id=SUB, tenant_id=TENANT, bot="triage-bot",
                                        rule=MatchRule(event_types=("card.moved",))))
        await kit.cards.put(Card(tenant_id=TENANT, card_id="c1", title="c1", column="doing"))

        async def produce(card: str) -> str:
            with app.get_tracer("board-app").start_as_current_span("PATCH /cards",
                                                                   kind=SpanKind.SERVER):
                event = await emit(live_db, TENANT, "card.moved", card, actor="ann",
                                   tracer_provider=app)
            return f"{TENANT}/{event.seq}/sub/{SUB}"

        cfg = load_config(env={}, projections=[], worker=WORKER,
                          tail={"seed": "earliest", "change_streams": False},
                          service={"replica_name": "A"})
        async with open_stores(launcher=HttpLauncher(bot.url, tracer_provider=tp_a),
                               uri=live_uri, database=live_db.name, change_feed=False) as stores:
            a = Service(stores, cfg, tracer_provider=tp_a)
            a.tail.handoff = None  # A's worker runs only when this test says: rows born pending

            # --- event 1: materialized by A, launched by B, retried once --------------------
            first = await produce("c1")
            bot.script[first] = [503]
            assert await a.drain_pass(full=True)
            assert await row_state(live_db, first) == "pending"
            b = spawn_b(live_uri, live_db.name, bot.url, endpoint, tmp_path)
            try:
                await until("B launches event 1 twice", lambda: bot.seen(first) == 2)
                done_1 = time.monotonic() + 40
                while await row_state(live_db, first) != "done":
                    assert time.monotonic() < done_1, "event 1 never done"
                    await anyio.sleep(0.1)

                # --- event 2: B holds it at the bot and dies; A reclaims and launches --------
                second = await produce("c1")
                bot.script[second] = ["hold"]
                assert await a.drain_pass(full=True)
                await until("B launches event 2", lambda: bot.seen(second) == 1)
                # B's spans of event 1 are out before the crash (its batch exporter: 100 ms)
                await until("B's event-1 spans exported", lambda: sum(
                    1 for s in sink.spans() if s["name"] == EXECUTE
                    and s["attributes"].get("board_outbox.row_key") == first) == 2)
                b.send_signal(signal.SIGKILL)
                b.wait(10)
            finally:
                if b.poll() is None:
                    b.kill()
                    b.wait(10)
            bot.release.set()  # the held request ends (its caller is gone)
            reclaim_by = time.monotonic() + 40
            while await row_state(live_db, second) != "done":
                assert time.monotonic() < reclaim_by, "A never reclaimed event 2"
                await a.work_pass()
                await anyio.sleep(0.1)
            await stores.launcher.aclose()  # type: ignore[attr-defined]
        for tp in (app, tp_a, bot.tp):
            tp.force_flush()
        log_b = (tmp_path / "b.log").read_text(errors="replace")

    spans = load(tmp_path / "spans.jsonl")
    retry = row_tree(spans, first)
    check_chain(retry, first, [("B", 1, "retry"), ("B", 2, "launched")])
    crash = row_tree(spans, second)
    # the bot's span of B's lost attempt: in the same trace, its parent (B's POST) died with B
    orphan = [(d, s) for d, s in crash if s.service == "test-bot" and d == 0]
    assert len(orphan) == 1, render_text(crash, second)
    kept = [(d, s) for d, s in crash if (d, s) not in orphan]
    check_chain(kept, second, [("A", 2, "launched")])
    assert {s.trace_id for _, s in crash} == {kept[0][1].trace_id}
    # B's JSON log lines about event 1 name its trace
    trace_1 = retry[0][1].trace_id
    lines = [ln for ln in log_b.splitlines() if first in ln]
    assert lines and all(f'"trace_id":"{trace_1}"' in ln for ln in lines), lines
    # the waterfall draws both
    text = render_text(retry, first) + "\n\n" + render_text(crash, second)
    (tmp_path / "row-waterfall.txt").write_text(text + "\n")
    render_png(retry, first, tmp_path / "row-waterfall.png")
    assert (tmp_path / "row-waterfall.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(text)
