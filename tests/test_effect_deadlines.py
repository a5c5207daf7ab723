"""Plugins cannot stop the worker (issue 20 item 4): past ``max_execution_seconds`` an effect, a
projection's apply or a handler's prepare is cancelled, the attempt counts and the row retries or
parks, while other rows and tenants go on; a plugin that blocks the event loop is measured and
named; ``/healthz`` fails when the worker makes no progress while rows are claimed. On every
backend, and through ``board-outbox run`` on the wire server."""

from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from board_outbox.engine.work.watchdog import LoopWatch, Progress
from board_outbox.model.clock import ManualClock
from board_outbox.model.domain import MatchRule, Subscription, launch_row_key
from board_outbox.service.runtime import build_registry
from tests.support.hung_plugins import BLOCK, HANG, HANGING_PROJECTION
from tests.support.kits import Kit
from tests.support.process import running, stop_gracefully
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 0.3
HUNG = Subscription(sub_id="hung", tenant_id="t1", bot="x", kind="hang",
                    rule=MatchRule(event_types=("card.moved",)))
OTHER = Subscription(sub_id="fine", tenant_id="t2", bot="bot-b")


async def _two_tenants(kit: Kit) -> None:
    await kit.sub(HUNG)
    await kit.sub(OTHER)
    for t in ("t1", "t2"):
        await kit.card(t, "c1")
        await kit.emit(t, "card.moved", "c1")


@pytest.mark.anyio
@pytest.mark.parametrize("max_attempts", [3, 1])
async def test_a_hung_effect_is_cancelled_counted_and_the_other_tenant_runs(
    kit: Kit, max_attempts: int
) -> None:
    await _two_tenants(kit)
    reg = build_registry(kit.stores, [], {"hang": HANG})
    tail = kit.tail(seed="earliest", kinds=reg.kinds)
    for t in ("t1", "t2"):
        await tail.drain_tenant(t)
    worker = kit.worker(registry=reg, max_execution_seconds=DEADLINE, max_attempts=max_attempts)
    t0 = time.monotonic()
    with anyio.fail_after(20):  # the suite's own guard: without the deadline this never returns
        res = await worker.tick_any()
    assert time.monotonic() - t0 < 10
    assert res.done == 1  # the other tenant's launch
    if max_attempts > 1:
        assert (res.retried, res.failed) == (1, 0)
    else:
        assert (res.retried, res.failed) == (0, 1)
    raw = await kit.raw_row(launch_row_key("t1", 1, "hung"))
    assert raw is not None and raw["attempts"] == 1
    assert raw["state"] == ("pending" if max_attempts > 1 else "failed")
    assert "handler 'hang' on row t1/1/sub/hung ran past max_execution_seconds" in raw["errors"][-1]["error"]
    assert worker.progress.busy is False


@pytest.mark.anyio
async def test_a_hung_projection_is_cancelled_batched_and_then_row_by_row(kit: Kit) -> None:
    await kit.card("t1", "c1")
    for _ in range(2):
        await kit.emit("t1", "card.moved", "c1")
    reg = build_registry(kit.stores, [HANGING_PROJECTION])
    tail = kit.tail(projections=tuple(reg.projections), seed="earliest", kinds=reg.kinds)
    await tail.drain_tenant("t1")
    worker = kit.worker(registry=reg, max_execution_seconds=DEADLINE)
    with anyio.fail_after(20):
        res = await worker.tick_any()
    assert (res.claimed, res.retried, res.done) == (2, 2, 0)
    errors = [r.errors[-1].error for r in await kit.rows("t1")]
    assert all("projection 'hanging' on row" in e or "handler 'projection' on row" in e
               for e in errors), errors
    assert all("ran past max_execution_seconds" in e for e in errors), errors


@pytest.mark.anyio
async def test_a_hung_prepare_means_per_row_reads(kit: Kit, caplog: pytest.LogCaptureFixture) -> None:
    await _two_tenants(kit)
    reg = build_registry(kit.stores, [])
    launch = reg.handler("launch")

    async def never(rows: Any) -> Any:
        await anyio.sleep_forever()

    launch.prepare = never  # type: ignore[attr-defined]
    tail = kit.tail(seed="earliest", kinds=reg.kinds)
    await tail.drain_tenant("t2")
    worker = kit.worker(registry=reg, max_execution_seconds=DEADLINE)
    with caplog.at_level(logging.WARNING, logger="board_outbox.worker"), anyio.fail_after(20):
        res = await worker.tick_any()
    assert res.done == 1
    assert "handler 'launch' prepare (1 rows) ran past max_execution_seconds" in caplog.text


@pytest.mark.anyio
async def test_a_plugin_that_blocks_the_event_loop_is_measured_and_named(
    kit: Kit, caplog: pytest.LogCaptureFixture
) -> None:
    await kit.sub(Subscription(sub_id="blk", tenant_id="t1", bot="x", kind="block"))
    await kit.card("t1", "c1")
    await kit.emit("t1", "card.created", "c1")
    reg = build_registry(kit.stores, [], {"block": BLOCK})
    await kit.tail(seed="earliest", kinds=reg.kinds).drain_tenant("t1")
    worker = kit.worker(registry=reg)
    worker.watch = LoopWatch(time.monotonic)  # the service's clock: real time
    with caplog.at_level(logging.WARNING, logger="board_outbox.watchdog"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: worker.watch.monitor(interval=0.05, threshold=0.5))
            await anyio.sleep(0.1)
            res = await worker.tick_any()
            await anyio.sleep(0.2)
            tg.cancel_scope.cancel()
    assert res.done == 1
    assert worker.watch.stalls == 1 and worker.watch.max_lag >= 1.0
    assert "event loop blocked for" in caplog.text
    assert "handler 'block' on row t1/1/sub/blk" in caplog.text


def test_the_loop_watch_names_only_the_steps_in_flight_then() -> None:
    now = [0.0]
    watch = LoopWatch(lambda: now[0])
    with watch.step("early"):
        now[0] = 1.0
    with watch.step("blocker"):
        now[0] = 5.0
    assert watch.running_between(2.0, 5.0) == ["blocker"]
    assert watch.observe(expected=2.0, woke=5.0, threshold=1.0) == 3.0
    assert watch.observe(expected=5.1, woke=5.2, threshold=1.0) == pytest.approx(0.1)
    assert (watch.stalls, watch.max_lag) == (1, 3.0)


def test_progress_is_stuck_only_while_rows_are_claimed() -> None:
    clock = ManualClock(100.0)
    p = Progress(clock)
    clock.advance(1000)
    assert p.stuck_for() == 0.0  # idle: nothing claimed
    p.busy = True
    p.beat()
    clock.advance(50)
    assert p.stuck_for() == 50.0


@pytest.mark.anyio
async def test_healthz_fails_when_the_worker_is_stuck_with_rows_claimed() -> None:
    from board_outbox.adapters.memory import MemoryBackend
    from board_outbox.service.config_sections import Config
    from board_outbox.service.runtime import Service
    from board_outbox.surface.http.checks import liveness

    svc = Service(MemoryBackend().stores(), Config())
    svc.loops = {"tail": True, "worker": True}
    assert liveness(svc) == {}
    w = svc.worker
    w.progress.busy = True
    w.progress.at = w.clock.now() - (w.settings.max_execution_seconds + w.settings.lease_seconds + 5)
    assert "no progress for" in liveness(svc)["worker"]
    w.progress.busy = False
    assert liveness(svc) == {}


def test_a_hung_handler_under_run_on_the_wire_parks_and_the_others_launch(
    live_uri: str, tmp_path: Path
) -> None:
    """``board-outbox run`` with a handler that never returns: its row is cancelled at the
    deadline on each attempt and parks; the other tenant's launch is done meanwhile; SIGTERM
    still exits 0."""
    from pymongo import MongoClient

    name = f"deadline_{uuid.uuid4().hex[:8]}"
    cfg = tmp_path / "board-outbox.toml"
    cfg.write_text(
        f'[store]\nbackend = "mongo"\nuri = "{live_uri}"\ndatabase = "{name}"\n'
        '[service]\nreplica_name = "deadline"\n'
        '[tail]\nseed = "earliest"\npoll_interval_seconds = 0.2\n'
        '[worker]\nidle_seconds = 0.05\nlease_seconds = 1\nmax_execution_seconds = 1.5\n'
        'max_attempts = 2\nbackoff_base_seconds = 0.05\n'
        f'[handlers]\nhang = "{HANG}"\n')
    client: MongoClient[dict[str, Any]] = MongoClient(live_uri)
    db = client[name]
    db["trigger_subscriptions"].insert_many([
        {"_id": "hung", "sub_id": "hung", "tenant_id": "t1", "bot": "x", "kind": "hang",
         "rule": {"event_types": ["card.moved"]}},
        {"_id": "fine", "sub_id": "fine", "tenant_id": "t2", "bot": "bot-b"},
    ])
    for t in ("t1", "t2"):
        db["board_cards"].insert_one({"_id": f"{t}/c1", "tenant_id": t, "card_id": "c1",
                                      "title": "x", "column": "inbox"})
        db["board_event_counters"].insert_one({"_id": t, "seq": 1})
        db["board_events"].insert_one({"tenant_id": t, "seq": 1, "type": "card.moved",
                                       "card_id": "c1", "at": time.time(), "actor": "ann"})
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    log = tmp_path / "run.log"
    rows = db["trigger_effects"]
    with running(cfg, log, env, cwd=ROOT) as proc:
        fine = {"row_key": launch_row_key("t2", 1, "fine"), "state": "done"}
        wait_until(lambda: rows.count_documents(fine) == 1 or proc.poll() is not None, 60,
              lambda: f"the other tenant launched: {list(rows.find())} {log.read_text()}")
        hung = {"row_key": launch_row_key("t1", 1, "hung"), "state": "failed"}
        wait_until(lambda: rows.count_documents(hung) == 1 or proc.poll() is not None, 60,
              lambda: f"the hung row parked: {list(rows.find())} {log.read_text()}")
        stop_gracefully(proc, log)
    row = rows.find_one({"row_key": launch_row_key("t1", 1, "hung")})
    assert row is not None and row["attempts"] == 2, row
    assert all("ran past max_execution_seconds" in e["error"] for e in row["errors"]), row["errors"]
    client.drop_database(name)
    client.close()
