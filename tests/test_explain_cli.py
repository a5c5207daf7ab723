"""``board-outbox explain ROW_KEY [--json]`` (issue 33, item 4): the command prints what the engine
answers (``engine/upkeep/explain.py``, tested on every backend in tests/contract/test_explain.py); a
text that is not a row key, or a key no row has, is one line and exit 2; ``--json`` is one
stable document. Last, the command against a running service on the wire."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.model.explanation import Explanation, Limit
from board_outbox.model.limits import bot_key
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.surface.cli import main

ROOT = Path(__file__).resolve().parent.parent
T = "acme"
HOLDER = f"{T}/7/sub/s:claim7"


def factory_for(backend: MemoryBackend) -> Any:
    @asynccontextmanager
    async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
        yield backend.stores()

    return factory


def _never(cfg: Any, *, ensure_schema: bool = False) -> Any:
    raise AssertionError("the store was opened for a text that is not a row key")


async def _deferred(backend: MemoryBackend) -> str:
    """One launch over its bot's in-flight limit (someone else holds the one slot), deferred
    by the worker: pending, waiting on the limit."""
    await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b", max_in_flight=1))
    await backend.board.put(Card(tenant_id=T, card_id="c"))
    await backend.events.emit(T, "card.created", "c", at=time.time())
    now = time.time()
    assert await backend.limits.acquire(bot_key(T, "b"), 1, HOLDER, until=now + 3600, now=now)
    cfg = load_config(env={}, tail={"seed": "earliest"}, projections=[],
                      limits={"wait_seconds": 600})
    service = Service(backend.stores(), cfg)
    await service.tail.drain_all()
    assert (await service.worker.tick_any()).deferred == 1
    return f"{T}/1/sub/s"


def test_explain_prints_the_limit_that_holds_a_row(capsys: pytest.CaptureFixture[str]) -> None:
    backend = MemoryBackend()
    key = anyio.run(_deferred, backend)
    assert main(["explain", key], factory=factory_for(backend)) == 0
    out = capsys.readouterr().out
    assert f"row {key}: launch of s, tenant {T}, seq 1" in out
    assert f"limit          bot in-flight limit of {bot_key(T, 'b')} (1): 1 of 1 slots held" in out
    assert f"held by {HOLDER} until" in out
    assert "deferred" in out and "event" in out and "materialized" in out


def test_explain_json_is_one_stable_document(capsys: pytest.CaptureFixture[str]) -> None:
    backend = MemoryBackend()
    key = anyio.run(_deferred, backend)
    assert main(["explain", key, "--json"], factory=factory_for(backend)) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    doc = json.loads(out)
    assert list(doc) == ["schema", "row_key", "at", "row", "holds", "timeline", "notes"]
    assert doc["schema"] == 1 and doc["row_key"] == key
    hold = doc["holds"][0]
    assert (hold["hold"], hold["key"], hold["full"]) == ("limit", bot_key(T, "b"), True)
    assert hold["holders"][0]["holder"] == HOLDER
    assert [m["what"] for m in doc["timeline"]] == ["event", "materialized", "deferred"]
    x = msgspec.json.decode(out, type=Explanation)  # decodes back into the documented types
    assert isinstance(x.holds[0], Limit) and x.row is not None and x.row.state == "pending"


async def _prioritized(backend: MemoryBackend) -> str:
    """One pending launch row of a subscription at priority 4 (issue 33)."""
    await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b", priority=4))
    await backend.board.put(Card(tenant_id=T, card_id="c"))
    await backend.events.emit(T, "card.created", "c", at=time.time())
    cfg = load_config(env={}, tail={"seed": "earliest"}, projections=[])
    await Service(backend.stores(), cfg).tail.drain_all()
    return f"{T}/1/sub/s"


def test_explain_shows_the_rows_priority(capsys: pytest.CaptureFixture[str]) -> None:
    backend = MemoryBackend()
    key = anyio.run(_prioritized, backend)
    assert main(["explain", key], factory=factory_for(backend)) == 0
    out = capsys.readouterr().out
    assert f"row {key}: launch of s, tenant {T}, seq 1, priority 4" in out
    assert "priority 4: within its tenant's share of a claim" in out
    assert main(["explain", key, "--json"], factory=factory_for(backend)) == 0
    assert json.loads(capsys.readouterr().out)["row"]["priority"] == 4


async def _held(backend: MemoryBackend) -> tuple[str, float]:
    """A launch row the service held for its tenant's pause (paused 2 minutes ago by ana)."""
    from board_outbox.engine.flow.pause import PauseGate

    await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await backend.board.put(Card(tenant_id=T, card_id="c"))
    await backend.events.emit(T, "card.created", "c", at=time.time())
    since = float(int(time.time())) - 120
    assert await backend.pauses.pause("tenant", T, reason="INC-42", by="ana", at=since)
    cfg = load_config(env={}, tail={"seed": "earliest"}, projections=[])
    service = Service(backend.stores(), cfg)
    assert isinstance(service.worker.pause, PauseGate)
    await service.worker.pause.refresh(force=True)
    await service.tail.drain_all()
    assert (await service.worker.tick_any()).held == 1
    return f"{T}/1/sub/s", since


def test_explain_names_the_pause_that_holds_a_row(capsys: pytest.CaptureFixture[str]) -> None:
    """F3: the pause's scope and key, since when (UTC) and who, and how to lift it -- not a
    deferral "which names no limit"."""
    from datetime import UTC, datetime

    backend = MemoryBackend()
    key, since = anyio.run(_held, backend)
    assert main(["explain", key], factory=factory_for(backend)) == 0
    out = capsys.readouterr().out
    at = datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"paused         held by the pause of tenant {T}, since {at}" in out
    assert "by ana: INC-42" in out and f"`board-outbox resume --tenant {T}`" in out
    assert "names no limit" not in out and "limit " not in out
    assert main(["explain", key, "--json"], factory=factory_for(backend)) == 0
    [hold] = json.loads(capsys.readouterr().out)["holds"]
    assert (hold["hold"], hold["scope"], hold["key"], hold["since"], hold["by"]) == (
        "paused", "tenant", T, since, "ana")


def test_an_unknown_row_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    backend = MemoryBackend()
    anyio.run(_deferred, backend)
    assert main(["explain", f"{T}/9/sub/s"], factory=factory_for(backend)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no row '{T}/9/sub/s'" in err and "Traceback" not in err


@pytest.mark.parametrize("text", ["", "acme", "acme/1/sub", "acme/x/sub/s", "acme/0/sub/s",
                                  "acme/1/job/s", "ac me/1/sub/s", "acme/1/sub/s/x",
                                  "acme/1/sub/" + "s" * 300, "acme/1/sub/s\n"])
def test_a_text_that_is_not_a_row_key_is_one_line_exit_2(
        text: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", text], factory=_never) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a row key" in err and "Traceback" not in err
    assert len(err) < 400  # a 300-character key is not echoed whole


# --- over the wire -----------------------------------------------------------------------


@pytest.mark.live_mongo
@pytest.mark.anyio
async def test_explain_on_the_wire_beside_a_running_service(live_uri: str, live_db: Any,
                                                            tmp_path: Path) -> None:
    """A running service defers one launch over its limit and dead-letters another; the
    command, a separate process on the same database, names each hold and the service's
    replica as the owner of a due row."""
    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo import mongo_stores

    launcher = MemoryLauncher()
    launcher.fail = lambda r: r.sub_id == "broken"
    stores = mongo_stores(live_db, launcher)
    await stores.cards.put(Card(tenant_id=T, card_id="c"))
    await stores.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b", max_in_flight=1))
    await stores.subs.put(Subscription(sub_id="broken", tenant_id=T, bot="x"))
    now = time.time()
    assert stores.limits is not None
    assert await stores.limits.acquire(bot_key(T, "b"), 1, HOLDER, until=now + 3600, now=now)
    seq = await stores.events.allocate_seq(T)
    await stores.events.insert({"tenant_id": T, "seq": seq, "type": "card.created",
                                "card_id": "c", "at": now})
    cfg = load_config(env={}, tail={"seed": "earliest", "poll_interval_seconds": 0.2},
                      worker={"max_attempts": 1, "idle_seconds": 0.05}, projections=[],
                      limits={"wait_seconds": 600}, service={"replica_name": "replica-a"})
    service = Service(stores, cfg, rng=random.Random(1))
    coll = live_db["trigger_effects"]
    conf = tmp_path / "bo.toml"
    conf.write_text(f'[store]\nbackend = "mongo"\nuri = "{live_uri}"\n'
                    f'database = "{live_db.name}"\n[worker]\nmax_attempts = 1\n')

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "board_outbox", "explain", *args,
                               "--config", str(conf)], capture_output=True, text=True,
                              timeout=60, env={"PYTHONPATH": str(ROOT / "src"),
                                               "PATH": "/usr/bin:/bin"})

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            while not (await coll.find_one({"row_key": f"{T}/1/sub/s", "waiting": {"$ne": None}})
                       and await coll.find_one({"row_key": f"{T}/1/sub/broken",
                                                "state": "failed"})):
                await anyio.sleep(0.05)
            limited = await anyio.to_thread.run_sync(lambda: cli(f"{T}/1/sub/s", "--json"))
            assert limited.returncode == 0, limited.stderr
            doc = json.loads(limited.stdout)
            assert [h["hold"] for h in doc["holds"]] == ["limit"]
            assert doc["holds"][0]["holders"] == [{"holder": HOLDER,
                                                   "until": pytest.approx(now + 3600)}]
            failed = await anyio.to_thread.run_sync(lambda: cli(f"{T}/1/sub/broken"))
            assert failed.returncode == 0, failed.stderr
            assert "failed" in failed.stdout and "launcher refused" in failed.stdout
            assert f"dead-letters replay {T}/1/sub/broken" in failed.stdout
            service.stop()
    # a due row no replica runs to claim: a replica's lease, as its heartbeat writes it, names
    # the owner of its tenant (read from the membership store by the command)
    assert stores.members is not None
    await stores.members.heartbeat(service.ownership.member_id, time.time(),
                                   cfg.membership.lease_seconds)
    await coll.insert_one({"tenant_id": "zeta", "row_key": "zeta/1/sub/q", "seq": 1,
                           "kind": "launch", "sub_id": "q", "state": "pending",
                           "not_before": now, "created_at": now, "updated_at": now})
    due = await anyio.to_thread.run_sync(lambda: cli("zeta/1/sub/q", "--json"))
    assert due.returncode == 0, due.stderr
    holds = json.loads(due.stdout)["holds"]
    assert [h["hold"] for h in holds] == ["ownership", "turn"]
    assert holds[0]["owner"] == service.ownership.member_id
    assert holds[0]["owner"].startswith("replica-a:") and holds[1]["ahead"] == 0
    missing = await anyio.to_thread.run_sync(lambda: cli(f"{T}/2/sub/s"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
