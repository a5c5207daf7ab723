"""Effect kinds that subscriptions produce (issue 19, item 6): a subscription names the kind its
matches materialize (default ``launch``); the tail writes rows of that kind, the registry hands
them to the user's handler; a kind nobody handles dead-letters with the reason and the tail says
so; a malformed kind costs only its subscription. On every backend, and end to end through
``board-outbox run`` on the wire server."""

from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from board_outbox.model.errors import InvalidId
from board_outbox.model.row_keys import launch_row_key
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.service.runtime import build_registry
from board_outbox.surface.demo.notify import TOPIC, notifications
from tests.conftest import BACKENDS
from tests.support.kits import Kit
from tests.support.process import running, stop_gracefully
from tests.support.waiting import wait_until

T = "t1"
DONE = Subscription(sub_id="done", tenant_id=T, bot="#team", kind="notify",
                    rule=MatchRule(event_types=("card.moved",), column="done"))
ALL = Subscription(sub_id="all", tenant_id=T, bot="bot-a")
ROOT = Path(__file__).resolve().parent.parent


async def _board(kit: Kit) -> None:
    await kit.sub(DONE)
    await kit.sub(ALL)
    await kit.card(T, "c1", column="done")
    await kit.emit(T, "card.moved", "c1")  # seq 1: both match
    await kit.emit(T, "card.created", "c1")  # seq 2: only the launch subscription


@pytest.mark.anyio
async def test_a_subscriptions_kind_is_the_kind_of_its_rows_and_its_handler_runs_them(kit: Kit) -> None:
    await _board(kit)
    reg = build_registry(kit.stores, [], {"notify": TOPIC})
    tail = kit.tail(seed="earliest", kinds=reg.kinds)
    res = await tail.drain_tenant(T)
    assert (res.rows, res.unhandled) == (3, 0)
    rows = {r.row_key: r for r in await kit.rows(T)}
    key = launch_row_key(T, 1, "done")
    assert sorted(rows) == sorted([key, launch_row_key(T, 1, "all"), launch_row_key(T, 2, "all")])
    row = rows[key]
    assert (row.kind, row.sub_id, row.seq) == ("notify", "done", 1)
    assert row.event is not None and (row.event.card_id, row.event.column) == ("c1", "done")
    assert {r.kind for k, r in rows.items() if k != key} == {"launch"}

    worker = kit.worker(registry=reg)
    assert (await worker.tick_any()).done == 3
    raw = await kit.raw_row(key)
    assert raw is not None and (raw["state"], raw["outcome"]) == ("done", "notified #team")
    got = await notifications(kit.readmodels, T, "done")
    assert [(e["seq"], e["to"], e["card_id"], e["type"]) for e in got] == [
        (1, "#team", "c1", "card.moved")]
    # the notify row launched nothing; the launch rows launched their bot
    assert sorted((r.seq, r.bot) for r in kit.launcher.launches) == [(1, "bot-a"), (2, "bot-a")]


@pytest.mark.anyio
async def test_a_notify_row_that_runs_twice_notifies_once_and_edits_are_honoured(kit: Kit) -> None:
    await _board(kit)
    reg = build_registry(kit.stores, [], {"notify": TOPIC})
    await kit.tail(seed="earliest", kinds=reg.kinds).drain_tenant(T)
    (row,) = [r for r in await kit.rows(T) if r.kind == "notify"]
    handler = reg.handler("notify")
    from board_outbox.sdk import ExecutionContext

    ctx: ExecutionContext[Any] = ExecutionContext(None, kit.outbox, kit.clock)  # type: ignore[arg-type]
    assert await handler.execute(row, ctx) == "notified #team"
    assert await handler.execute(row, ctx) == "notified #team"  # a crash before its done mark
    assert len(await notifications(kit.readmodels, T, "done")) == 1
    # the subscription now wants another column: the row is dropped (re-verified, as a launch)
    await kit.sub(Subscription(sub_id="done", tenant_id=T, bot="#team", kind="notify",
                               rule=MatchRule(column="review")))
    assert await handler.execute(row, ctx) == "dropped: no longer matches"
    await kit.subs.delete("done")
    assert await handler.execute(row, ctx) == "dropped: subscription deleted"


@pytest.mark.anyio
async def test_a_launch_row_is_dropped_once_its_subscription_asks_for_another_kind(kit: Kit) -> None:
    await kit.sub(ALL)
    await kit.card(T, "c1")
    await kit.emit(T, "card.created", "c1")
    reg = build_registry(kit.stores, [], {"notify": TOPIC})
    await kit.tail(seed="earliest", kinds=reg.kinds).drain_tenant(T)
    await kit.sub(Subscription(sub_id="all", tenant_id=T, bot="bot-a", kind="notify"))
    assert (await kit.worker(registry=reg).tick_any()).done == 1
    raw = await kit.raw_row(launch_row_key(T, 1, "all"))
    assert raw is not None and raw["outcome"] == "dropped: subscription now of kind 'notify'"
    assert kit.launcher.launches == []


@pytest.mark.anyio
async def test_a_launch_that_already_spent_its_labels_launches_whatever_the_kind_is_now(kit: Kit) -> None:
    await kit.sub(Subscription(sub_id="ship", tenant_id=T, bot="shipper", consume_labels=("ship",),
                               kind="notify"))  # edited after the labels were spent (M6)
    await kit.card(T, "c1")
    await kit.insert_raw_row({
        "tenant_id": T, "row_key": launch_row_key(T, 1, "ship"), "seq": 1, "kind": "launch",
        "sub_id": "ship", "state": "pending", "not_before": 0.0, "attempts": 1,
        "consume_marked": True, "event": {"seq": 1, "type": "card.labeled", "card_id": "c1",
                                          "labels": ["ship"]}})
    reg = build_registry(kit.stores, [], {"notify": TOPIC})
    assert (await kit.worker(registry=reg).tick_any()).done == 1
    assert [(r.bot, r.seq) for r in kit.launcher.launches] == [("shipper", 1)]


@pytest.mark.anyio
async def test_a_kind_nobody_handles_is_flagged_once_and_dead_letters_with_the_reason(
    kit: Kit, caplog: pytest.LogCaptureFixture
) -> None:
    await kit.sub(Subscription(sub_id="pager", tenant_id=T, bot="oncall", kind="page"))
    await kit.sub(ALL)
    await kit.card(T, "c1")
    reg = build_registry(kit.stores, [])  # no handler for "page"
    tail = kit.tail(seed="earliest", kinds=reg.kinds)
    worker = kit.worker(registry=reg, max_attempts=3)
    caplog.set_level(logging.WARNING, logger="board_outbox")
    unhandled = 0
    for _ in range(3):
        await kit.emit(T, "card.created", "c1")
        unhandled += (await tail.drain_tenant(T)).unhandled
        await worker.tick_any()
    assert unhandled == 3
    flags = [r.getMessage() for r in caplog.records if "no handler is registered" in r.getMessage()]
    assert len(flags) == 1 and "pager" in flags[0] and "'page'" in flags[0], flags
    rows = await kit.rows(T)
    pages = [r for r in rows if r.kind == "page"]
    assert len(pages) == 3 and all(r.state == "failed" for r in pages)
    assert all("no effect handler registered for kind 'page'" in r.errors[-1].error for r in pages)
    assert all(r.state == "done" for r in rows if r.kind == "launch")  # the others flow
    assert len(kit.launcher.launches) == 3


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["", "a/b", "projection", "x" * 201])
async def test_a_malformed_kind_is_refused_when_stored(kit: Kit, kind: str) -> None:
    with pytest.raises(InvalidId, match="invalid kind"):
        await kit.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b", kind=kind))
    assert await kit.subs.list_for_tenant(T) == []


@pytest.mark.anyio
@pytest.mark.parametrize("kit", [b for b in BACKENDS if b != "memory"], indirect=True)
async def test_a_subscription_stored_before_kinds_existed_reads_as_a_launch(kit: Kit) -> None:
    """Documents only: the memory twin stores Subscription values."""
    coll = kit.subs._target.coll  # type: ignore[attr-defined]  # trigger_subscriptions, raw
    await coll.insert_one({"_id": "old", "sub_id": "old", "tenant_id": T, "bot": "b"})
    (sub,) = await kit.subs.list_for_tenant(T)
    assert (sub.sub_id, sub.kind) == ("old", "launch")
    assert (await kit.subs.get("old")).kind == "launch"


# --- end to end: `board-outbox run` on the wire server ------------------------------------------


@pytest.mark.live_mongo
def test_a_user_kind_runs_end_to_end_through_run(live_uri: str, tmp_path: Path) -> None:
    """``board-outbox run`` as a subprocess with ``[handlers] notify = ...``: an event matching a
    ``kind = "notify"`` subscription ends as a row done by the notify handler; one matching a
    kind nobody registered ends as a dead-letter, and the service said so on stderr."""
    from pymongo import MongoClient

    name = f"kinds_{uuid.uuid4().hex[:8]}"
    cfg = tmp_path / "board-outbox.toml"
    cfg.write_text(
        f'[store]\nbackend = "mongo"\nuri = "{live_uri}"\ndatabase = "{name}"\n'
        '[service]\nreplica_name = "kinds"\n'
        '[tail]\nseed = "earliest"\npoll_interval_seconds = 0.2\n'
        '[worker]\nidle_seconds = 0.05\n'
        f'[handlers]\nnotify = "{TOPIC}"\n')
    client: MongoClient[dict[str, Any]] = MongoClient(live_uri)
    db = client[name]
    db["trigger_subscriptions"].insert_many([
        {"_id": "done", "sub_id": "done", "tenant_id": T, "bot": "#team", "kind": "notify",
         "rule": {"event_types": ["card.moved"], "column": "done"}},
        {"_id": "pager", "sub_id": "pager", "tenant_id": T, "bot": "oncall", "kind": "page",
         "rule": {"event_types": ["card.moved"]}},
    ])
    db["board_cards"].insert_one({"_id": f"{T}/c1", "tenant_id": T, "card_id": "c1",
                                  "title": "ship it", "column": "done"})
    db["board_event_counters"].insert_one({"_id": T, "seq": 1})
    db["board_events"].insert_one({"tenant_id": T, "seq": 1, "type": "card.moved",
                                   "card_id": "c1", "at": time.time(), "actor": "ann"})
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    log = tmp_path / "run.log"
    rows = db["trigger_effects"]
    with running(cfg, log, env) as proc:
        settled = {"sub_id": {"$ne": None}, "state": {"$in": ["done", "failed"]}}
        wait_until(lambda: rows.count_documents(settled) == 2 or proc.poll() is not None, 60,
              lambda: f"both rows settled: {list(rows.find())} {log.read_text()}")
        stop_gracefully(proc, log)
    notify = rows.find_one({"row_key": launch_row_key(T, 1, "done")})
    assert notify is not None, list(rows.find())
    assert (notify["kind"], notify["state"], notify["outcome"]) == ("notify", "done", "notified #team")
    (note,) = db["read_models"].find({"model": "notifications"})  # the handler's read model
    assert (note["key"], [(e["seq"], e["to"], e["actor"]) for e in note["recent"]]) == (
        "done", [(1, "#team", "ann")])
    page = rows.find_one({"row_key": launch_row_key(T, 1, "pager")})
    assert page is not None and (page["kind"], page["state"]) == ("page", "failed")
    assert "no effect handler registered for kind 'page'" in page["errors"][-1]["error"]
    stderr = log.read_text()
    assert stderr.count("names effect kind 'page', which no handler is registered for") == 1, stderr
    client.drop_database(name)
    client.close()


# --- the demo ------------------------------------------------------------------------------------


def _demo(capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from board_outbox.surface.cli import main

    rc = main(["demo", "--store", "memory", "--events", "400", "--rate", "4000", "--tenants", "2"])
    return rc, capsys.readouterr().out


def test_the_demo_runs_a_user_kind_and_counts_its_rows(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    rc, out = _demo(capsys)
    assert rc == 0, out
    assert "subscriptions (kinds launch, notify)" in out
    m = re.search(r"notify rows \(a user effect kind\) (\d+): (\d+) notified by the notify handler, "
                  r"(\d+) notifications recorded", out)
    assert m is not None, out
    rows, notified, recorded = map(int, m.groups())
    assert 0 < notified == recorded <= rows
    assert re.search(rf"\b{rows} notify\b", out)  # in the rows-by-kind line


def test_the_demo_fails_when_notify_rows_are_not_run_by_the_handler(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from board_outbox.surface.demo.notify import Notify

    async def impostor(self: Notify, row: Any, ctx: Any) -> str:
        return "sent somewhere"  # done, but not by what the handler does

    monkeypatch.setattr(Notify, "execute", impostor)
    rc, out = _demo(capsys)
    assert rc == 1 and "notify rows not done by the notify handler" in out, out
