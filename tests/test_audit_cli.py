"""``board-outbox audit``, ``replay`` and ``dead-letters replay --dry-run`` (A1, A4): the commands
on the memory backend with their one-line errors, and over the wire: a running service's
background audit finds a row deleted behind its back and exports it as
``board_outbox_audit_missing_rows``; the commands find it (and a planted orphan), repair it once,
and a replay writes what the current rules owe."""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.surface.cli import main

ROOT = Path(__file__).resolve().parent.parent
T = "t1"


def run_cli(backend: MemoryBackend, *args: str) -> int:
    @asynccontextmanager
    async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
        yield backend.stores()

    return main(list(args), factory=factory)


def _materialized(n: int = 6) -> MemoryBackend:
    """n events of t1, materialized with board-reflect; subscription s fires on card.created."""
    backend = MemoryBackend()

    async def go() -> None:
        await backend.board.put(Card(tenant_id=T, card_id="c"))
        await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b",
                                            rule=MatchRule(event_types=("card.created",))))
        for i in range(n):
            await backend.events.emit(T, "card.created" if i % 3 == 0 else "card.updated", "c",
                                      time.time())
        cfg = load_config(env={}, tail={"seed": "earliest"})
        tail = Service(backend.stores(), cfg).tail
        tail.handoff = None  # born pending: no worker runs here, so none bounds the backlog
        await tail.drain_all()

    anyio.run(go)
    return backend


def test_audit_finds_missing_and_orphaned_rows_exits_1_and_repairs(
        capsys: pytest.CaptureFixture[str]) -> None:
    backend = _materialized()
    assert run_cli(backend, "audit", "--tenant", T) == 0
    assert "missing: 0 rows" in capsys.readouterr().out
    assert backend.outbox.delete_raw(f"{T}/4/proj/board-reflect")
    backend.outbox.insert_raw({"tenant_id": T, "row_key": f"{T}/2/sub/ghost", "seq": 2,
                               "kind": "launch", "sub_id": "ghost", "state": "done"})
    assert run_cli(backend, "audit", "--tenant", T) == 1
    out = capsys.readouterr().out
    assert "missing: 1 rows" in out and f"seq        4  projection  {T}/4/proj/board-reflect" in out
    assert "orphaned: 1 rows" in out and f"{T}/2/sub/ghost  (no subscription)" in out
    assert run_cli(backend, "audit", "--tenant", T, "--since", "5", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["after"] == 4 and doc["missing"] == [] and doc["events"] == 2
    assert run_cli(backend, "audit", "--tenant", T, "--repair") == 0
    assert "repaired: 1 rows re-materialized" in capsys.readouterr().out
    assert backend.outbox.raw(f"{T}/4/proj/board-reflect") is not None
    assert run_cli(backend, "audit", "--tenant", T, "--json") == 0
    assert json.loads(capsys.readouterr().out)["missing"] == []


def test_replay_dry_run_lists_what_would_fire_and_the_real_run_writes_it_once(
        capsys: pytest.CaptureFixture[str]) -> None:
    backend = _materialized()
    anyio.run(backend.subs.put, Subscription(sub_id="late", tenant_id=T, bot="late-bot"))
    before = len(backend.outbox.all_docs())
    assert run_cli(backend, "replay", "--tenant", T, "--since", "5", "--dry-run") == 0
    out = capsys.readouterr().out
    assert f"fire           {T}/5/sub/late  -> bot late-bot (subscription late)" in out
    assert "(dry run): 2 events" in out and "would write 2 rows" in out
    assert len(backend.outbox.all_docs()) == before
    assert run_cli(backend, "replay", "--tenant", T, "--since", "1", "--subscription", "s",
                   "--dry-run", "--all-rows") == 0
    out = capsys.readouterr().out
    assert f"queued         {T}/1/sub/s" in out and "late" not in out
    assert run_cli(backend, "replay", "--tenant", T, "--since", "5") == 0
    assert "wrote 2 rows" in capsys.readouterr().out
    assert run_cli(backend, "replay", "--tenant", T, "--since", "5", "--json") == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["written"] == 0 and {r["action"] for r in plan["rows"]} == {"queued"}
    assert len(backend.outbox.all_docs()) == before + 2


def test_dead_letter_replay_dry_run_says_what_each_would_do_and_changes_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    backend = MemoryBackend()

    async def go() -> None:
        await backend.board.put(Card(tenant_id=T, card_id="c", column="todo"))
        for sub in ("keep", "moved", "gone"):
            await backend.subs.put(Subscription(sub_id=sub, tenant_id=T, bot=f"bot-{sub}"))
        await backend.events.emit(T, "card.created", "c", time.time())
        backend.launcher.fail = lambda _r: True
        cfg = load_config(env={}, tail={"seed": "earliest"}, worker={"max_attempts": 1},
                          projections=[])
        service = Service(backend.stores(), cfg)
        await service.tail.drain_all()
        await service.worker.tick_any()
        await backend.subs.put(Subscription(sub_id="moved", tenant_id=T, bot="bot-moved",
                                            rule=MatchRule(column="done")))
        await backend.subs.delete("gone")

    anyio.run(go)
    states = {d["row_key"]: d["state"] for d in backend.outbox.all_docs()}
    assert set(states.values()) == {"failed"}
    assert run_cli(backend, "dead-letters", "replay", "--all", "--tenant", T, "--dry-run") == 0
    out = capsys.readouterr().out
    assert f"{T}/1/sub/keep: would launch bot bot-keep" in out
    assert f"{T}/1/sub/moved: would be dropped: no longer matches the subscription" in out
    assert f"{T}/1/sub/gone: would be dropped: subscription deleted" in out
    assert "dry run: 3 of 3 rows would return to pending; nothing changed" in out
    assert {d["row_key"]: d["state"] for d in backend.outbox.all_docs()} == states


@pytest.mark.parametrize("args", [
    ["audit", "--tenant", "nope"],
    ["replay", "--tenant", "nope", "--since", "1"],
    ["replay", "--tenant", T, "--since", "1", "--subscription", "nope"],
])
def test_unknown_tenant_or_subscription_is_one_line_exit_2(
        args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(_materialized(1), *args) == 2
    err = capsys.readouterr().err
    assert err.startswith("board-outbox: ") and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err and "nope" in err


@pytest.mark.parametrize("args", [
    ["audit"], ["audit", "--tenant", T, "--since", "0"], ["audit", "--tenant", T, "--since", "x"],
    ["replay", "--tenant", T], ["replay", "--tenant", T, "--since", "-3"],
])
def test_bad_arguments_are_usage_errors(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        run_cli(MemoryBackend(), *args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"board-outbox {args[0]}: error:" in err and "Traceback" not in err


@pytest.mark.parametrize(("command", "flag"), [("audit", "--repair"), ("replay", "--dry-run"),
                                              ("dead-letters replay", "--dry-run")])
def test_help(command: str, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        run_cli(MemoryBackend(), *command.split(), "--help")
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert flag in out and "--tenant" in out


# --- over the wire -----------------------------------------------------------------------


@pytest.mark.timeout(180)  # heavy: tens of seconds on a loaded machine (default 90 s)
@pytest.mark.live_mongo
@pytest.mark.anyio
async def test_the_service_audit_and_the_commands_find_a_deleted_row_and_an_orphan_on_the_wire(
        live_uri: str, live_db: Any, tmp_path: Path) -> None:
    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo import mongo_stores
    from board_outbox.surface.http import open_ops_server

    launcher = MemoryLauncher()
    stores = mongo_stores(live_db, launcher)
    await stores.cards.put(Card(tenant_id=T, card_id="c"))
    await stores.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b",
                                       rule=MatchRule(event_types=("card.created",))))
    for i in range(8):
        seq = await stores.events.allocate_seq(T)
        await stores.events.insert({"tenant_id": T, "seq": seq, "card_id": "c", "at": time.time(),
                                    "type": "card.created" if i % 4 == 0 else "card.updated"})
    cfg = load_config(env={}, tail={"seed": "earliest", "poll_interval_seconds": 0.2},
                      worker={"idle_seconds": 0.05}, audit={"interval_seconds": 0.2,
                                                            "batch_events": 3},
                      service={"metrics_interval_seconds": 0.2})
    service = Service(stores, cfg, rng=random.Random(1))
    coll = live_db["trigger_effects"]

    async def metric() -> str:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ops.port}") as client:
            text = (await client.get("/metrics")).text
        return next((x for x in text.splitlines()
                     if x.startswith("board_outbox_audit_missing_rows{")), "")

    with anyio.fail_after(60):
        async with open_ops_server(service, "127.0.0.1", 0) as ops, \
                anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            while await coll.count_documents({"state": "done"}) < 10:
                await anyio.sleep(0.05)
            while service.audit.head.get(T) != 8:
                await anyio.sleep(0.05)
            assert service.audit.missing_rows() == {T: 0}
            await coll.delete_one({"row_key": f"{T}/6/proj/board-reflect"})  # behind its back
            while service.audit.missing_rows().get(T) != 1:
                await anyio.sleep(0.05)  # the sweep comes round to seq 6
            assert await metric() == f'board_outbox_audit_missing_rows{{tenant_id="{T}"}} 1.0'
            await coll.insert_one({"tenant_id": T, "row_key": f"{T}/3/sub/ghost", "seq": 3,
                                   "kind": "launch", "sub_id": "ghost", "state": "done"})
            conf = tmp_path / "bo.toml"
            conf.write_text(f'[store]\nbackend = "mongo"\nuri = "{live_uri}"\n'
                            f'database = "{live_db.name}"\n')

            def cli(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run([sys.executable, "-m", "board_outbox", *args, "--config",
                                       str(conf)], capture_output=True, text=True, timeout=60,
                                      env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})

            found = await anyio.to_thread.run_sync(lambda: cli("audit", "--tenant", T))
            assert found.returncode == 1, found.stderr
            assert f"{T}/6/proj/board-reflect  (missing)" in found.stdout
            assert f"{T}/3/sub/ghost  (no subscription)" in found.stdout
            fixed = await anyio.to_thread.run_sync(lambda: cli("audit", "--tenant", T, "--repair"))
            assert fixed.returncode == 0 and "repaired: 1 rows" in fixed.stdout, fixed.stderr
            while service.audit.missing_rows().get(T) != 0:
                await anyio.sleep(0.05)  # the re-check sees the row back
            while await coll.count_documents({"state": {"$ne": "done"}}):
                await anyio.sleep(0.05)  # the repaired row runs (a projection: idempotent)
            await stores.subs.put(Subscription(sub_id="late", tenant_id=T, bot="late-bot"))
            dry = await anyio.to_thread.run_sync(
                lambda: cli("replay", "--tenant", T, "--since", "7", "--dry-run"))
            assert dry.returncode == 0 and "would write 2 rows" in dry.stdout, dry.stderr
            real = await anyio.to_thread.run_sync(
                lambda: cli("replay", "--tenant", T, "--since", "7"))
            assert real.returncode == 0 and "wrote 2 rows" in real.stdout, real.stderr
            while len([r for r in launcher.launches if r.sub_id == "late"]) < 2:
                await anyio.sleep(0.05)
            service.stop()
    assert sorted(r.seq for r in launcher.launches if r.sub_id == "late") == [7, 8]
    assert sorted(r.seq for r in launcher.launches if r.sub_id == "s") == [1, 5]


@pytest.mark.anyio
async def test_the_background_audit_rides_out_a_failing_store(caplog: pytest.LogCaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """R1: the audit loop logs a failed pass and tries again; it never ends the service."""
    from board_outbox.model.errors import StoreUnavailable

    caplog.set_level(logging.WARNING, logger="board_outbox")
    backend = MemoryBackend()
    await backend.board.put(Card(tenant_id=T, card_id="c"))
    for _ in range(3):
        await backend.events.emit(T, "card.updated", "c", time.time())
    real = backend.outbox.rows_between
    fails = 3

    async def flaky(*args: Any) -> Any:
        nonlocal fails
        if fails:
            fails -= 1
            raise StoreUnavailable("rows_between: connection reset")
        return await real(*args)

    monkeypatch.setattr(backend.outbox, "rows_between", flaky)
    cfg = load_config(env={}, tail={"seed": "earliest", "poll_interval_seconds": 0.05},
                      worker={"idle_seconds": 0.02}, audit={"interval_seconds": 0.02})
    service = Service(backend.stores(), cfg, rng=random.Random(1))
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            while service.audit.head.get(T) != 3:
                await anyio.sleep(0.02)
            assert backend.outbox.delete_raw(f"{T}/2/proj/board-reflect")
            while service.audit.missing_rows().get(T) != 1:
                await anyio.sleep(0.02)
            assert service.loops["audit"] is True
            service.stop()
    assert fails == 0
    assert sum("audit pass failed: StoreUnavailable" in r.getMessage() for r in caplog.records) == 3


def test_repair_over_a_store_that_times_out_on_big_writes_finishes_in_one_run_with_progress(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30: `audit --repair` over a long log stopped after one slow chunk (a 500-row bulk
    write past the store's operation timeout) and had to be run again and again. Here the store
    times out on any write of more than 40 rows: the run still repairs every missing row, says
    how far it got as it goes (stderr), and exits 0."""
    from board_outbox.model.errors import StoreUnavailable

    backend = _materialized(n=240)
    for seq in range(1, 241):
        assert backend.outbox.delete_raw(f"{T}/{seq}/proj/board-reflect")
    real = backend.outbox.upsert_rows
    sizes: list[int] = []

    async def slow_on_big_writes(rows: Any, **kw: Any) -> Any:
        sizes.append(len(rows))
        if len(rows) > 40:
            raise StoreUnavailable("operation exceeded time limit (injected: a slow bulk write)")
        return await real(rows, **kw)

    backend.outbox.upsert_rows = slow_on_big_writes  # type: ignore[method-assign]
    assert run_cli(backend, "audit", "--tenant", T, "--repair", "--batch-size", "100") == 0
    out, err = capsys.readouterr()
    assert "repaired: 240 rows re-materialized" in out, out + err
    assert all(backend.outbox.raw(f"{T}/{s}/proj/board-reflect") is not None for s in range(1, 241))
    assert max(sizes) > 40 and "Traceback" not in err
    progress = [line for line in err.splitlines() if line.startswith(f"audit {T}: ")]
    assert progress and progress[-1].startswith(f"audit {T}: seq 240 of 240"), err
    assert "240 repaired" in progress[-1]
