"""``board-outbox rebuild PROJECTION --tenant T --shadow | --drop-shadow`` (B3, issue 12 item 7):
the command on the memory backend, its one-line errors, and end to end over the wire server
under a running ``board-outbox run`` that keeps emitting launches and projection rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import ReadModelVersions
from board_outbox.surface.cli import main
from tests.support.live_mongo import LiveServer

ROOT = Path(__file__).resolve().parent.parent
T = "t1"
P = "board-reflect"


def run_cli(backend: MemoryBackend, *args: str) -> int:
    @asynccontextmanager
    async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
        yield backend.stores()

    return main(list(args), factory=factory)


def test_shadow_rebuild_command_swaps_and_drop_has_nothing_to_drop(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOARD_OUTBOX_STORE__GENERATION_CACHE_SECONDS", "0.05")
    backend = MemoryBackend()

    async def seed() -> None:
        for i in range(4):
            await backend.board.put(Card(tenant_id=T, card_id=f"c{i}", column="doing"))
            await backend.events.emit(T, "card.created", f"c{i}", time.time() - 3600)

    anyio.run(seed)
    assert run_cli(backend, "rebuild", P, "--tenant", T, "--shadow", "--swap") == 0
    out = capsys.readouterr()
    assert "generation 1 (from seq 0): 4 events applied up to seq 4" in out.out
    assert "swapped: readers now see generation 1; generation 0 removed (0 documents)" in out.out
    assert "shadow rebuild board-reflect" in out.err  # the progress bar
    assert anyio.run(backend.rm_versions.get, P, T) == ReadModelVersions(active=1)
    model = anyio.run(backend.readmodels.list, f"{P}#1", T)
    assert [d["key"] for d in model] == ["c0", "c1", "c2", "c3"]
    # again: generation 2 replaces generation 1
    assert run_cli(backend, "rebuild", P, "--tenant", T, "--shadow", "--swap") == 0
    assert "generation 1 removed (4 documents)" in capsys.readouterr().out
    assert run_cli(backend, "rebuild", P, "--tenant", T, "--drop-shadow") == 0
    assert "no shadow rebuild of board-reflect for t1 to drop" in capsys.readouterr().out


def test_shadow_flags_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    backend = MemoryBackend()
    for bad in (["--shadow", "--drop-shadow"], ["--shadow", "--gap-wait", "-1"]):
        with pytest.raises(SystemExit) as exc:
            run_cli(backend, "rebuild", P, "--tenant", T, *bad)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "board-outbox rebuild: error:" in err and "Traceback" not in err


@pytest.mark.live_mongo
def test_shadow_rebuild_under_a_running_service_over_the_wire(live: LiveServer, tmp_path: Path) -> None:
    """A running service keeps launching and projecting while a shadow rebuild replaces the
    read model: the model readers see is whole before, during and after the swap, the new
    generation holds every card at its latest event, and no launch is fired twice."""
    from pymongo import MongoClient

    dbname = f"shadow_{uuid.uuid4().hex[:8]}"
    client: MongoClient[dict[str, Any]] = MongoClient(live.uri)
    db = client[dbname]
    cards = [f"c{i}" for i in range(6)]

    async def seed() -> None:
        from pymongo import AsyncMongoClient

        from board_outbox.adapters.memory import MemoryLauncher
        from board_outbox.adapters.mongo import mongo_stores

        aclient: Any = AsyncMongoClient(live.uri, tz_aware=True)
        stores = mongo_stores(aclient[dbname], MemoryLauncher())
        await stores.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
        for c in cards:
            await stores.cards.put(Card(tenant_id=T, card_id=c, title=c, column="inbox"))
        await aclient.close()

    anyio.run(seed)
    seq = 0

    def emit(card: str, column: str) -> None:
        nonlocal seq
        seq += 1
        db["board_cards"].update_one({"tenant_id": T, "card_id": card}, {"$set": {"column": column}})
        db["board_event_counters"].update_one({"_id": T}, {"$max": {"seq": seq}}, upsert=True)
        db["board_events"].insert_one({"tenant_id": T, "seq": seq, "type": "card.moved",
                                       "card_id": card, "at": time.time()})

    cfg = tmp_path / "bo.toml"
    cfg.write_text(f"""
projections = ["board-reflect"]
[store]
backend = "mongo"
uri = "{live.uri}"
database = "{dbname}"
generation_cache_seconds = 0.5
[tail]
seed = "earliest"
poll_interval_seconds = 0.2
[worker]
idle_seconds = 0.05
[launcher]
kind = "log"
[service]
log_format = "json"
""")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    log = (tmp_path / "run.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "board_outbox", "run", "--config", str(cfg)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)

    def model_readers_see() -> dict[str, str]:
        v = db["read_model_versions"].find_one({"_id": f"{P}/{T}"}) or {}
        name = P if not v.get("active") else f"{P}#{v['active']}"
        return {d["key"]: d["column"] for d in db["read_models"].find({"model": name, "tenant_id": T})}

    def settled() -> bool:
        return (db["trigger_effects"].count_documents({"state": {"$ne": "done"}}) == 0
                and db["trigger_effects"].count_documents({}) == 2 * seq)

    try:
        for c in cards:
            emit(c, "doing")
        deadline = time.time() + 60
        while not settled():
            assert time.time() < deadline, "the first rows did not settle"
            time.sleep(0.1)
        assert model_readers_see() == {c: "doing" for c in cards}

        # keep the service busy while the rebuild runs, and watch what readers see
        stop = threading.Event()
        partial: list[dict[str, str]] = []

        def traffic() -> None:
            i = 0
            while not stop.is_set():
                emit(cards[i % len(cards)], f"col{i}")
                seen = model_readers_see()
                if set(seen) != set(cards):
                    partial.append(seen)
                i += 1
                time.sleep(0.05)

        t = threading.Thread(target=traffic)
        t.start()
        try:
            rb = subprocess.run([sys.executable, "-m", "board_outbox", "rebuild", P, "--tenant",
                                 T, "--shadow", "--swap", "--config", str(cfg)],
                                env=env, capture_output=True, text=True, timeout=120)
        finally:
            stop.set()
            t.join()
        assert rb.returncode == 0, rb.stderr
        assert "swapped: readers now see generation 1" in rb.stdout
        assert partial == []  # readers never saw a half-built (or emptied) model
        deadline = time.time() + 60
        while not settled():
            assert time.time() < deadline, "the rows emitted during the rebuild did not settle"
            time.sleep(0.1)
        model = {d["key"]: d["last_seq"] for d in
                 db["read_models"].find({"model": f"{P}#1", "tenant_id": T})}
        last_seq = {}
        for ev in db["board_events"].find({"tenant_id": T}):
            last_seq[ev["card_id"]] = max(last_seq.get(ev["card_id"], 0), ev["seq"])
        assert model == last_seq  # every card at its latest event
        assert db["read_models"].count_documents({"model": P}) == 0  # generation 0 removed
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
        client.drop_database(dbname)
        client.close()
    lines = [json.loads(x) for x in (tmp_path / "run.log").read_text().splitlines()
             if x.startswith("{")]
    launched = [x["row_key"] for x in lines if x.get("logger") == "board_outbox.launcher"]
    assert len(launched) == len(set(launched)) == seq  # one launch per event, none fired twice


@pytest.mark.parametrize("mode", [["--shadow", "--swap"], ["--shadow"], []])
def test_a_projection_that_raises_ends_the_rebuild_with_one_line_and_a_consistent_pointer(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        mode: list[str]) -> None:
    """Issue 30: a projection that raised mid-rebuild ended `rebuild --shadow` in a Python
    traceback and left its pointer `building` (every projection row then wrote a generation
    nobody would finish). Now: one line naming the projection, the seq and the error, exit 2;
    the shadow is dropped (the pointer names the live generation only, the shadow's documents
    removed), the live model untouched."""
    monkeypatch.setenv("BOARD_OUTBOX_STORE__GENERATION_CACHE_SECONDS", "0.05")
    name = "raises-at-3"
    cfg = tmp_path / "c.toml"
    cfg.write_text('projections = ["tests.support.user_plugins:RaisesAtSeq3"]\n')
    backend = MemoryBackend()

    async def seed() -> None:
        for i in range(5):
            await backend.board.put(Card(tenant_id=T, card_id=f"c{i}", column="doing"))
            await backend.events.emit(T, "card.created", f"c{i}", time.time() - 3600)
        await backend.readmodels.upsert_if_newer(name, T, "live", 1, {"kept": True})

    anyio.run(seed)
    assert run_cli(backend, "rebuild", name, "--tenant", T, "--config", str(cfg),
                   "--batch-size", "1", *mode) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("board-outbox")]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and "ValueError" in lines[0] and "seq 3" in lines[0], err
    assert "this projection has a bug" in lines[0] and name in lines[0]
    versions = anyio.run(backend.rm_versions.get, name, T)
    assert versions.building is None and versions.problem is None, versions
    if mode:  # the live generation untouched, the shadow's documents gone
        assert versions.active == 0
        live = anyio.run(backend.readmodels.list, name, T)
        assert [d["key"] for d in live] == ["live"]
        assert anyio.run(backend.readmodels.list, f"{name}#1", T) == []
    assert run_cli(backend, "rebuild", name, "--tenant", T, "--config", str(cfg),
                   "--drop-shadow") == 0
    assert "no shadow rebuild" in capsys.readouterr().out
