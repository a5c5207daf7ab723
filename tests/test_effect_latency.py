"""Per-tenant effect latency with trace links (A5): the histogram of event insert -> row done per
tenant and kind, each observation carrying its row's trace id as an exemplar, served as
OpenMetrics when the scraper asks for it (Prometheus text otherwise); ``status`` shows each
tenant's p50/p99 from the store. On the memory twin and over the wire."""

from __future__ import annotations

import json
import random
import re
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.engine.telemetry.spans import trace_id_of
from board_outbox.model.board import Card
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import Stores
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.surface.cli import main
from board_outbox.surface.http.metrics import exposition

T = "t1"
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
EXEMPLAR = re.compile(r'^board_outbox_effect_latency_seconds_bucket\{kind="(\w+)",le="[^"]+",'
                      r'tenant_id="(\w+)"\} [\d.]+ # \{trace_id="([0-9a-f]{32})"\} ([\d.e-]+)',
                      re.M)


async def _settle(stores: Stores, service: Service) -> None:
    await stores.cards.put(Card(tenant_id=T, card_id="c"))
    await stores.cards.put(Card(tenant_id="t2", card_id="c"))
    await stores.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    for tenant, n in ((T, 3), ("t2", 2)):
        for _ in range(n):
            seq = await stores.events.allocate_seq(tenant)
            await stores.events.insert({"tenant_id": tenant, "seq": seq, "type": "card.created",
                                        "card_id": "c", "at": time.time() - 2.0})
    await service.tail.drain_all()
    for _ in range(20):
        if not (await service.worker.tick_any()).claimed:
            break


def _check_exemplars(text: str, stores_traces: set[str]) -> None:
    found = EXEMPLAR.findall(text)
    assert {(kind, tenant) for kind, tenant, _, _ in found} == {
        ("launch", T), ("projection", T), ("projection", "t2")}
    assert {trace for _, _, trace, _ in found} <= stores_traces
    assert all(float(v) >= 2.0 for *_, v in found)  # the events were inserted 2 s before


def test_histogram_per_tenant_and_kind_with_trace_id_exemplars_on_the_memory_twin() -> None:
    backend = MemoryBackend()
    cfg = load_config(env={}, tail={"seed": "earliest"})
    service = Service(backend.stores(), cfg, rng=random.Random(1), tracer_provider=TracerProvider())
    anyio.run(_settle, backend.stores(), service)
    docs = backend.outbox.all_docs()
    assert {d["state"] for d in docs} == {"done"} and len(docs) == 8
    traces = {trace_id_of(d["trace"]["traceparent"]) or "" for d in docs}
    registry = service.metrics.prom.registry
    ctype, body = exposition(registry, OPENMETRICS)
    assert ctype.startswith("application/openmetrics-text") and body.endswith(b"# EOF\n")
    _check_exemplars(body.decode(), traces)
    ctype, body = exposition(registry, "text/plain")
    assert ctype.startswith("text/plain") and b" # {" not in body
    assert b'board_outbox_effect_latency_seconds_count{kind="projection",tenant_id="t2"} 2.0' in body


def test_status_shows_each_tenants_p50_p99(capsys: pytest.CaptureFixture[str]) -> None:
    backend = MemoryBackend()
    service = Service(backend.stores(), load_config(env={}, tail={"seed": "earliest"}),
                      rng=random.Random(1))
    anyio.run(_settle, backend.stores(), service)

    @asynccontextmanager
    async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
        yield backend.stores()

    assert main(["status", "--json"], factory=factory) == 0
    by = {t["tenant_id"]: t for t in json.loads(capsys.readouterr().out)["tenants"]}
    assert by[T]["effect_latency_rows"] == 6 and by["t2"]["effect_latency_rows"] == 2
    for t in by.values():
        assert 2.0 <= t["effect_latency_p50_seconds"] <= t["effect_latency_p99_seconds"] < 60
    assert main(["status"], factory=factory) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if " t2 " in ln)
    assert re.search(r"\d\.\ds / \d\.\ds", line)


@pytest.mark.live_mongo
@pytest.mark.anyio
async def test_exemplars_and_status_latency_over_the_wire(live_uri: str, live_db: Any,
                                                          tmp_path: Path) -> None:
    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo import mongo_stores
    from board_outbox.surface.http import open_ops_server

    stores = mongo_stores(live_db, MemoryLauncher())
    cfg = load_config(env={}, tail={"seed": "earliest"}, service={"metrics_interval_seconds": 0.2})
    service = Service(stores, cfg, rng=random.Random(1), tracer_provider=TracerProvider())
    await _settle(stores, service)
    docs = await live_db["trigger_effects"].find({}).to_list(None)
    assert {d["state"] for d in docs} == {"done"} and len(docs) == 8
    traces = {trace_id_of(d["trace"]["traceparent"]) or "" for d in docs}
    async with open_ops_server(service, "127.0.0.1", 0) as ops, \
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{ops.port}") as client:
        om = await client.get("/metrics", headers={"Accept": OPENMETRICS})
        plain = await client.get("/metrics")
    assert om.headers["content-type"].startswith("application/openmetrics-text")
    _check_exemplars(om.text, traces)
    assert plain.headers["content-type"].startswith("text/plain") and " # {" not in plain.text
    conf = tmp_path / "bo.toml"
    conf.write_text(f'[store]\nbackend = "mongo"\nuri = "{live_uri}"\ndatabase = "{live_db.name}"\n')
    proc = await anyio.run_process(
        [sys.executable, "-m", "board_outbox", "status", "--json", "--config", str(conf)], check=False,
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr.decode()
    by = {t["tenant_id"]: t for t in json.loads(proc.stdout)["tenants"]}
    assert by[T]["effect_latency_rows"] == 6 and by["t2"]["effect_latency_rows"] == 2
    assert 2.0 <= by[T]["effect_latency_p50_seconds"] <= by[T]["effect_latency_p99_seconds"] < 60
