"""O5: explicit read and write concerns. The wire server accepts concerns and ignores them
(docs/testing.md, "What the wire server cannot prove"), so these tests check what matters on a
real replica set: that the commands the tail and the worker send CARRY them, read through
pymongo command monitoring."""

from __future__ import annotations

import functools
import random
import uuid
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from board_outbox.model.board import Card
from board_outbox.model.errors import ConfigError
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.backends import open_backend
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from tests.support.live_mongo import LiveServer

T = "t1"


class Recorder(monitoring.CommandListener):
    def __init__(self) -> None:
        self.commands: list[tuple[str, str, dict[str, Any]]] = []  # (name, collection, command)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        cmd = dict(event.command)
        coll = cmd.get(event.command_name)
        self.commands.append((event.command_name, coll if isinstance(coll, str) else "", cmd))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def of(self, name: str, coll: str) -> list[dict[str, Any]]:
        return [c for n, k, c in self.commands if n == name and k == coll]


async def _drain_and_run(live: LiveServer, monkeypatch: pytest.MonkeyPatch,
                         **store: Any) -> Recorder:
    from board_outbox.adapters.mongo import client as client_mod

    rec = Recorder()
    monkeypatch.setattr(client_mod, "AsyncMongoClient",
                        functools.partial(AsyncMongoClient, event_listeners=[rec]))
    cfg = load_config(env={}, store={"backend": "mongo", "uri": live.uri,
                                     "database": f"concerns_{uuid.uuid4().hex[:8]}", **store},
                      tail={"seed": "earliest"})
    async with open_backend(cfg, ensure_schema=True) as stores:
        await stores.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
        await stores.cards.put(Card(tenant_id=T, card_id="c"))
        for _ in range(2):
            seq = await stores.events.allocate_seq(T)
            await stores.events.insert({"tenant_id": T, "seq": seq, "type": "card.created",
                                        "card_id": "c", "at": 1.0})
        service = Service(stores, cfg, rng=random.Random(1))
        rec.commands.clear()  # only what the tail and the worker send from here
        await service.tail.drain_all([T])
        res = await service.worker.tick_any()
        assert res.done == 4  # 2 launches + 2 board-reflect rows
    return rec


@pytest.mark.anyio
@pytest.mark.live_mongo
async def test_reads_are_majority_and_writes_are_w_majority(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    rec = await _drain_and_run(live, monkeypatch)
    majority_read = {"level": "majority"}
    event_reads = rec.of("find", "board_events")
    cursor_reads = rec.of("find", "trigger_cursors")
    assert event_reads and cursor_reads
    for cmd in event_reads + cursor_reads:
        assert cmd.get("readConcern") == majority_read, cmd
    row_writes = rec.of("update", "trigger_effects") + rec.of("findAndModify", "trigger_effects")
    cursor_writes = rec.of("update", "trigger_cursors") + rec.of("findAndModify", "trigger_cursors")
    assert row_writes and cursor_writes
    for cmd in row_writes + cursor_writes:
        assert cmd.get("writeConcern", {}).get("w") == "majority", cmd


@pytest.mark.anyio
@pytest.mark.live_mongo
async def test_the_concerns_are_configurable(live: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = await _drain_and_run(live, monkeypatch, read_concern="local", write_concern=1)
    assert all(c.get("readConcern") == {"level": "local"} for c in rec.of("find", "board_events"))
    assert all(c.get("writeConcern", {}).get("w") == 1 for c in rec.of("update", "trigger_effects"))


def test_concern_settings_are_validated() -> None:
    cfg = load_config(env={})
    assert (cfg.store.read_concern, cfg.store.write_concern) == ("majority", "majority")
    assert load_config(env={"BOARD_OUTBOX_STORE__WRITE_CONCERN": "2"}).store.write_concern == 2
    with pytest.raises(ConfigError, match=r"store\.read_concern"):
        load_config(env={"BOARD_OUTBOX_STORE__READ_CONCERN": "eventual"})
    with pytest.raises(ConfigError, match=r"store\.write_concern"):
        load_config(env={"BOARD_OUTBOX_STORE__WRITE_CONCERN": "0"})
