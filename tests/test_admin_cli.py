"""Operator commands: dead-letters list/show/replay/purge, rebuild, run (C4, B1, B3)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model import transitions as tr
from board_outbox.model.board import Card
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service, build_registry
from board_outbox.surface.admin import parse_when, rebuild_projection
from board_outbox.surface.cli import main
from tests.support.kits import Kit

T = "t1"


def factory_for(backend: MemoryBackend) -> Any:
    @asynccontextmanager
    async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
        yield backend.stores()

    return factory


async def _dead_letters(backend: MemoryBackend, n: int = 3) -> list[str]:
    """n launch rows for tenant t1 and one for t2, all parked as failed."""
    await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await backend.subs.put(Subscription(sub_id="s2", tenant_id="t2", bot="b"))
    for tenant in (T, "t2"):
        await backend.board.put(Card(tenant_id=tenant, card_id="c"))
    for _ in range(n):
        await backend.events.emit(T, "card.created", "c")
    await backend.events.emit("t2", "card.created", "c")
    backend.launcher.fail = lambda _r: True
    cfg = load_config(env={}, tail={"seed": "earliest"}, worker={"max_attempts": 1}, projections=[])
    service = Service(backend.stores(), cfg)
    await service.tail.drain_all()
    await service.worker.tick_any()
    docs = backend.outbox.all_docs()
    assert all(d["state"] == "failed" for d in docs)
    return sorted(d["row_key"] for d in docs if d["tenant_id"] == T)


def run_cli(backend: MemoryBackend, *args: str) -> int:
    return main(list(args), factory=factory_for(backend))


def test_dead_letters_list_show_and_filters(capsys: pytest.CaptureFixture[str]) -> None:
    backend = MemoryBackend()
    keys = anyio.run(_dead_letters, backend)
    assert run_cli(backend, "dead-letters", "list", "--tenant", T) == 0
    out = capsys.readouterr().out
    assert all(k in out for k in keys) and "t2/" not in out and "3 dead-letters" in out
    assert "LaunchFailed" in out
    assert run_cli(backend, "dead-letters", "list", "--json") == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 4
    assert run_cli(backend, "dead-letters", "list", "--since", "1d", "--until", "2000-01-01") == 0
    assert "no dead-letters" in capsys.readouterr().out
    assert run_cli(backend, "dead-letters", "show", keys[0]) == 0
    out = capsys.readouterr().out  # for a person: where it stands and why
    assert f"row {keys[0]}: launch of subscription s" in out and "state failed" in out
    assert "LaunchFailed" in out and "{" not in out
    assert run_cli(backend, "dead-letters", "show", keys[0], "--json") == 0
    assert json.loads(capsys.readouterr().out)["state"] == "failed"
    assert run_cli(backend, "dead-letters", "show", "nope") == 1
    assert "no row 'nope'" in capsys.readouterr().err


def test_replay_keeps_history_and_audits(capsys: pytest.CaptureFixture[str]) -> None:
    backend = MemoryBackend()
    keys = anyio.run(_dead_letters, backend)
    assert run_cli(backend, "dead-letters", "replay", keys[0], "--by", "ops") == 0
    doc = backend.outbox.raw(keys[0])
    assert doc is not None and doc["state"] == "pending" and doc["attempts"] == 0
    assert len(doc["errors"]) == 1 and doc["audit"][-1]["by"] == "ops"
    assert run_cli(backend, "dead-letters", "replay", keys[0]) == 1  # no longer a dead-letter
    assert "left alone" in capsys.readouterr().out
    assert run_cli(backend, "dead-letters", "replay", "--all", "--tenant", T) == 0
    assert "2 of 2 rows" in capsys.readouterr().out
    assert run_cli(backend, "dead-letters", "replay") == 2
    assert "give ROW_KEY(s), --all or --filter" in capsys.readouterr().err


def test_purge_asks_unless_yes(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    backend = MemoryBackend()
    anyio.run(_dead_letters, backend)
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # noqa: SIM115 - closed at exit
    assert run_cli(backend, "dead-letters", "purge", "--tenant", T) == 2
    assert "confirm with --yes" in capsys.readouterr().err
    assert len(backend.outbox.all_docs()) == 4
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda _prompt: "n")
    assert run_cli(backend, "dead-letters", "purge", "--tenant", T) == 1
    assert len(backend.outbox.all_docs()) == 4
    assert run_cli(backend, "dead-letters", "purge", "--tenant", T, "--yes") == 0
    assert "purged 3" in capsys.readouterr().out
    assert [d["tenant_id"] for d in backend.outbox.all_docs()] == ["t2"]


@pytest.mark.anyio
async def test_replay_under_a_running_worker_is_executed() -> None:
    backend = MemoryBackend()
    keys = await _dead_letters(backend, n=1)
    backend.launcher.fail = None
    # a replayed row is another writer's: the worker's pick finds it, every net_pick_seconds
    # while the change stream is open
    cfg = load_config(env={}, tail={"seed": "earliest", "poll_interval_seconds": 0.05},
                      worker={"idle_seconds": 0.02, "net_pick_seconds": 0.05}, projections=[])
    service = Service(backend.stores(), cfg)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await anyio.sleep(0.1)  # the worker is running and finds nothing to do
        assert await backend.outbox.apply_failed(keys[0], tr.replay(now=time.time(), by="ops"))
        with anyio.fail_after(5):
            while backend.outbox.raw(keys[0])["state"] != "done":  # type: ignore[index]
                await anyio.sleep(0.01)
        service.stop()
    assert [r.row_key for r in backend.launcher.launches] == keys


@pytest.mark.anyio
async def test_rebuild_replays_from_zero_and_stops_at_young_gap(kit: Kit) -> None:
    for i in (1, 2):
        await kit.card(T, f"c{i}", column="inbox")
    await kit.emit(T, "card.created", "c1")
    await kit.emit(T, "card.created", "c2")
    await kit.readmodels.upsert_if_newer("board-reflect", T, "junk", 99, {"card_id": "junk"})
    reg = build_registry(kit.stores, ["board-reflect"])
    seen: list[tuple[int, int]] = []
    res = await rebuild_projection(name="board-reflect", tenant_id=T, registry=reg,
                                   events=kit.events, cards=kit.cards, clock=kit.clock,
                                   young_gap_seconds=30, progress=lambda d, h: seen.append((d, h)))
    assert res.applied == 2 and res.stopped_at_gap is None and seen[-1] == (2, 2)
    assert [d["key"] for d in await kit.readmodels.list("board-reflect", T)] == ["c1", "c2"]
    # a young gap: seq 3 allocated, seq 4 inserted just now -> stop at 3
    await kit.events.allocate_seq(T)
    await kit.emit(T, "card.moved", "c1")
    res = await rebuild_projection(name="board-reflect", tenant_id=T, registry=reg,
                                   events=kit.events, cards=kit.cards, clock=kit.clock,
                                   young_gap_seconds=30)
    assert res.stopped_at_gap == 3 and res.cursor == 2 and res.applied == 2
    kit.clock.advance(31)  # now it is a dead allocation: stepped over
    res = await rebuild_projection(name="board-reflect", tenant_id=T, registry=reg,
                                   events=kit.events, cards=kit.cards, clock=kit.clock,
                                   young_gap_seconds=30)
    assert res.stopped_at_gap is None and res.stepped_gaps == 1 and res.applied == 3


def test_rebuild_command_prints_progress_and_summary(capsys: pytest.CaptureFixture[str]) -> None:
    backend = MemoryBackend()

    async def seed() -> None:
        await backend.board.put(Card(tenant_id=T, card_id="c"))
        for _ in range(5):
            await backend.events.emit(T, "card.created", "c", time.time() - 3600)

    anyio.run(seed)
    assert run_cli(backend, "rebuild", "board-reflect", "--tenant", T) == 0
    captured = capsys.readouterr()
    assert "5 events applied up to seq 5 of 5" in captured.out
    assert "rebuild board-reflect" in captured.err  # the progress bar
    assert run_cli(backend, "rebuild", "nope", "--tenant", T) == 2
    assert "'nope' is not enabled" in capsys.readouterr().err


def test_parse_when() -> None:
    assert parse_when("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_when("2026-01-01T00:00:00Z") == parse_when("2026-01-01")
    with pytest.raises(ValueError, match="not a time"):
        parse_when("yesterday")


def test_run_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[store]\nbackend = "memory"\n'
                   '[service]\nlog_format = "json"\nreplica_name = "r1"\n'
                   '[tail]\npoll_interval_seconds = 0.1\n')
    import httpx

    from tests.test_ops import free_port

    port = free_port()  # wait for /healthz, not a fixed sleep: a loaded machine starts slowly
    proc = subprocess.Popen([sys.executable, "-m", "board_outbox", "run", "--config", str(cfg)],
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "BOARD_OUTBOX_SERVICE__HTTP_PORT": str(port)})
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        assert proc.poll() is None  # still running
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read() if proc.stderr else ""
    assert rc == 0, err
    assert '"msg":"SIGTERM: shutting down gracefully"' in err and "service stopped" in err


def test_run_with_bad_config_is_one_line_exit_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[tail]\nyoung_gap_seconds = 5\n")
    proc = subprocess.run([sys.executable, "-m", "board_outbox", "run", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "tail.young_gap_seconds (5) must exceed" in proc.stderr


def test_ensure_schema_needs_mongo() -> None:
    proc = subprocess.run([sys.executable, "-m", "board_outbox", "ensure-schema"],
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "BOARD_OUTBOX_STORE__BACKEND": "memory"})
    assert proc.returncode == 2 and "needs the mongo backend" in proc.stderr


def test_run_against_an_unreachable_replica_set_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "BOARD_OUTBOX_STORE__BACKEND": "mongo",
           "BOARD_OUTBOX_STORE__URI": f"mongodb://127.0.0.1:{port}/?directConnection=true",
           "BOARD_OUTBOX_STORE__SERVER_SELECTION_TIMEOUT_SECONDS": "1",
           "BOARD_OUTBOX_STORE__OP_TIMEOUT_SECONDS": "2"}
    proc = subprocess.run([sys.executable, "-m", "board_outbox", "run"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "board-outbox: store unavailable:" in proc.stderr and "Traceback" not in proc.stderr


def test_a_store_error_inside_the_running_service_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from board_outbox.model.errors import StoreError

    backend = MemoryBackend()

    async def refuse() -> set[str]:
        raise StoreError("not authorized on board_outbox to execute command")

    backend.outbox.live_tenants = refuse  # type: ignore[method-assign]
    assert run_cli(backend, "run") == 1
    err = capsys.readouterr().err
    assert "board-outbox: not authorized" in err and "Traceback" not in err


def test_admin_commands_on_the_mongo_adapters(capsys: pytest.CaptureFixture[str]) -> None:
    """dead-letters and rebuild through the CLI with the Mongo adapters (pymongo API, mongomock)."""
    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo import ensure_schema, mongo_stores
    from tests.support.mongomock_async import mock_database

    db = mock_database()
    launcher = MemoryLauncher(fail=lambda _r: True)
    stores = mongo_stores(db, launcher, change_feed=False)

    async def seed() -> None:
        await ensure_schema(db)
        await stores.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
        await stores.cards.put(Card(tenant_id=T, card_id="c", column="review"))
        for _ in range(2):
            seq = await stores.events.allocate_seq(T)
            await stores.events.insert({"tenant_id": T, "seq": seq, "type": "card.created",
                                        "card_id": "c", "at": time.time() - 3600})
        cfg = load_config(env={}, tail={"seed": "earliest"}, worker={"max_attempts": 1})
        service = Service(stores, cfg)
        await service.tail.drain_all()
        await service.worker.tick_any()

    anyio.run(seed)

    @asynccontextmanager
    async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
        yield stores

    assert main(["dead-letters", "list", "--tenant", T], factory=factory) == 0
    assert "2 dead-letters" in capsys.readouterr().out
    assert main(["dead-letters", "replay", "--all"], factory=factory) == 0
    assert "2 of 2 rows returned to pending" in capsys.readouterr().out
    assert anyio.run(stores.outbox.count_by_state, T) == {"pending": 2, "done": 2}  # + projections
    assert main(["rebuild", "board-reflect", "--tenant", T], factory=factory) == 0
    assert "2 events applied up to seq 2 of 2" in capsys.readouterr().out
    model = anyio.run(stores.readmodels.list, "board-reflect", T)
    assert [(d["card_id"], d["column"], d["last_seq"]) for d in model] == [("c", "review", 2)]
