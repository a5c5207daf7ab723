"""``board-outbox status`` (O3): the table, the stable --json document, --tenant, errors."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.model.limits import bot_key
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.surface.cli import main
from board_outbox.surface.http.metrics import ServiceCollector, exposition
from tests.support.live_mongo import LiveServer

T = "t1"
FIELDS = ["tenant_id", "cursor", "allocated_seq", "lag_events", "lag_seconds",
          "oldest_pending_age_seconds", "rows", "dead_letters", "stalled", "stalled_for_seconds",
          "problems", "effect_latency_p50_seconds", "effect_latency_p99_seconds",
          "effect_latency_rows", "waiting_on_limit", "held_by_pause"]


def factory_for(backend: MemoryBackend) -> Any:
    @asynccontextmanager
    async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
        yield backend.stores()

    return factory


async def _two_tenants(backend: MemoryBackend) -> None:
    """t1: 3 events, 2 materialized and run (one parked as a dead-letter), 1 behind the cursor;
    t2: 1 event, materialized, its rows born claimed for the worker and not run yet."""
    for tenant in (T, "t2"):
        await backend.subs.put(Subscription(sub_id=f"s-{tenant}", tenant_id=tenant, bot="b"))
        await backend.board.put(Card(tenant_id=tenant, card_id="c"))
    await backend.events.emit(T, "card.created", "c", at=1.0)
    await backend.events.emit(T, "card.created", "c", at=2.0)
    await backend.events.emit("t2", "card.created", "c", at=3.0)
    cfg = load_config(env={}, tail={"seed": "earliest"}, worker={"max_attempts": 1})
    service = Service(backend.stores(), cfg, rng=random.Random(1))
    await service.tail.drain_all()
    backend.launcher.fail = lambda r: r.seq == 2
    await service.worker.tick_any([T])  # t2's rows stay live (claimed, in the hand-off)
    await backend.events.emit(T, "card.created", "c", at=4.0)


def run(backend: MemoryBackend, *args: str) -> int:
    return main(["status", *args], factory=factory_for(backend))


def test_status_json_is_the_documented_stable_document(capsys: pytest.CaptureFixture[str]) -> None:
    backend = MemoryBackend()
    anyio.run(_two_tenants, backend)
    assert run(backend, "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == ["schema", "generated_at", "tenants", "replicas", "bad_documents"]
    assert doc["schema"] == 1
    assert doc["replicas"] == []  # no `run` heartbeats into this backend
    by = {t["tenant_id"]: t for t in doc["tenants"]}
    assert list(by) == [T, "t2"]
    assert all(list(t) == FIELDS for t in doc["tenants"])
    t1 = by[T]
    assert (t1["cursor"], t1["allocated_seq"], t1["lag_events"]) == (2, 3, 1)
    assert t1["lag_seconds"] > 0  # the event behind the cursor was made at t=4 (epoch)
    assert t1["rows"] == {"done": 3, "failed": 1} and t1["dead_letters"] == 1
    assert t1["oldest_pending_age_seconds"] is None
    t2 = by["t2"]
    assert (t2["lag_events"], t2["lag_seconds"], t2["rows"]) == (0, 0.0, {"claimed": 2})
    assert t2["oldest_pending_age_seconds"] >= 0

    assert run(backend, "--json", "--tenant", "t2") == 0
    assert [t["tenant_id"] for t in json.loads(capsys.readouterr().out)["tenants"]] == ["t2"]


async def _one_waiting(backend: MemoryBackend) -> Service:
    """One launch row over its subscription's in-flight limit (the one slot held elsewhere):
    deferred, pending, waiting (F2)."""
    await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b", max_in_flight=1))
    await backend.board.put(Card(tenant_id=T, card_id="c"))
    await backend.events.emit(T, "card.created", "c", at=time.time())
    service = Service(backend.stores(), load_config(env={}, tail={"seed": "earliest"}),
                      rng=random.Random(1))
    await service.tail.drain_all()
    now = time.time()
    assert await backend.limits.acquire(bot_key(T, "b"), 1, "elsewhere", until=now + 600, now=now)
    assert (await service.worker.tick_any([T])).deferred == 1
    return service


def test_status_shows_rows_waiting_on_a_limit(capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the table is wider than 140 with the count in it
    backend = MemoryBackend()
    service = anyio.run(_one_waiting, backend)
    assert run(backend, "--json") == 0
    [t1] = json.loads(capsys.readouterr().out)["tenants"]
    assert t1["waiting_on_limit"] == 1 and t1["rows"]["pending"] == 1
    assert run(backend) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if " t1 " in ln)
    assert "pending 1 (1 limited)" in line
    # /metrics: the per-tenant gauge and the deferral counter
    anyio.run(service.refresh_status)
    registry = service.metrics.prom.registry
    registry.register(ServiceCollector(service))
    text = exposition(registry, "text/plain")[1].decode()
    assert f'board_outbox_rows_waiting_on_limit{{tenant_id="{T}"}} 1.0' in text
    assert 'board_outbox_limited_total{kind="in_flight",scope="bot"} 1.0' in text


def test_status_table(capsys: pytest.CaptureFixture[str]) -> None:
    backend = MemoryBackend()
    anyio.run(_two_tenants, backend)
    assert run(backend) == 0
    out = capsys.readouterr().out
    assert "board-outbox status (2 tenants)" in out
    assert "lag (events)" in out and "dead-letters" in out
    line = next(ln for ln in out.splitlines() if " t1 " in ln)
    assert "done 3, failed 1" in line


def test_status_unknown_tenant_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    backend = MemoryBackend()
    anyio.run(_two_tenants, backend)
    assert run(backend, "--tenant", "nope") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "status: unknown tenant 'nope'" in err


@pytest.mark.live_mongo
def test_status_over_the_wire_server(live: LiveServer) -> None:
    from pymongo import MongoClient

    db = f"status_{uuid.uuid4().hex[:8]}"
    client: MongoClient[dict[str, Any]] = MongoClient(live.uri)
    try:
        client[db]["board_events"].insert_one({"tenant_id": "acme", "seq": 1, "type": "card.created",
                                               "card_id": "c", "at": 1.0})
        client[db]["board_event_counters"].insert_one({"_id": "acme", "seq": 1})
        # two replicas' membership leases (S1): one live, one expired an hour ago
        now = time.time()
        client[db]["board_outbox_members"].insert_many([
            {"_id": "replica-live", "expires_at": now + 600, "seen_at": now},
            {"_id": "replica-gone", "expires_at": now - 3600, "seen_at": now - 3610}])
    finally:
        client.close()
    # the replicas' heartbeat timeout: a lease further ahead than it is not trusted (issue 20)
    env = {**os.environ, "BOARD_OUTBOX_STORE__BACKEND": "mongo", "BOARD_OUTBOX_STORE__URI": live.uri,
           "BOARD_OUTBOX_STORE__DATABASE": db,
           "BOARD_OUTBOX_MEMBERSHIP__HEARTBEAT_TIMEOUT_SECONDS": "900"}
    proc = subprocess.run([sys.executable, "-m", "board_outbox", "status", "--json"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    tenants = report["tenants"]
    assert [t["tenant_id"] for t in tenants] == ["acme"] and tenants[0]["lag_events"] == 1
    assert [r["member_id"] for r in report["replicas"]] == ["replica-live"]
    assert 590 < report["replicas"][0]["lease_left_seconds"] <= 600
    proc = subprocess.run([sys.executable, "-m", "board_outbox", "status"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "replicas alive: 1: replica-live" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "board_outbox", "status", "--tenant", "zz"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
