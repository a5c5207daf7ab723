"""S1 on the wire: two ``board-outbox run`` processes share the tenants by rendezvous hashing;
the owner is SIGKILLed and the survivor drains its tenants within ``heartbeat_timeout``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from board_outbox.engine.flow.membership import owner

pytestmark = [pytest.mark.live_mongo]

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 4.0  # membership.heartbeat_timeout_seconds for this test
TENANTS = [f"t{i}" for i in range(8)]


def _spawn(uri: str, db: str, name: str, tmp: Path) -> subprocess.Popen[bytes]:
    cfg = tmp / f"{name}.toml"
    cfg.write_text(
        f'[store]\nbackend = "mongo"\nuri = "{uri}"\ndatabase = "{db}"\n'
        f'[service]\nreplica_name = "{name}"\nlog_level = "WARNING"\n'
        f'[tail]\nseed = "earliest"\n[membership]\nheartbeat_timeout_seconds = {TIMEOUT}\n'
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen([sys.executable, "-m", "board_outbox", "run", "--config", str(cfg)],
                            env=env, stdout=subprocess.DEVNULL,
                            stderr=open(tmp / f"{name}.log", "wb"))


def _emit(db: Any, tenant: str) -> int:
    seq = int(db["board_event_counters"].find_one_and_update(
        {"_id": tenant}, {"$inc": {"seq": 1}}, upsert=True, return_document=True)["seq"])
    db["board_events"].insert_one({"tenant_id": tenant, "seq": seq, "type": "card.created",
                                   "card_id": "c", "at": time.time()})
    return seq


def _launched(db: Any, tenants: list[str]) -> int:
    return int(db["trigger_effects"].count_documents(
        {"tenant_id": {"$in": tenants}, "kind": "launch", "state": "done"}))


def _wait(pred: Any, timeout: float) -> float:
    start = time.time()
    while time.time() - start < timeout:
        if pred():
            return time.time() - start
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout:.1f}s")


def test_a_sigkilled_owners_tenants_are_drained_by_the_survivor(live_uri: str, tmp_path: Path) -> None:
    name = f"failover_{uuid.uuid4().hex[:8]}"
    client: MongoClient[dict[str, Any]] = MongoClient(live_uri)
    db = client[name]
    db["trigger_subscriptions"].insert_many([
        {"_id": f"{t}.s", "sub_id": f"{t}.s", "tenant_id": t, "bot": "bot",
         "rule": {"event_types": ["card.created"]}} for t in TENANTS])
    db["board_cards"].insert_many([{"_id": f"{t}/c", "tenant_id": t, "card_id": "c", "title": "c",
                                    "column": "inbox"} for t in TENANTS])
    procs = {n: _spawn(live_uri, name, n, tmp_path) for n in ("a", "b")}
    try:
        _wait(lambda: db["board_outbox_members"].count_documents(
            {"expires_at": {"$gt": time.time()}}) == 2, 60)
        members = [str(d["_id"]) for d in db["board_outbox_members"].find()]
        owners = {t: owner(members, t) for t in TENANTS}
        victim_id = owners[TENANTS[0]]
        victim = next(n for n in procs if victim_id.startswith(f"{n}:"))
        theirs = [t for t in TENANTS if owners[t] == victim_id]
        for t in TENANTS:  # both replicas at work: every tenant drained once
            _emit(db, t)
        _wait(lambda: _launched(db, TENANTS) == len(TENANTS), 60)
        time.sleep(TIMEOUT)  # both have heartbeated since; their views agree

        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait()
        killed = time.time()
        for t in theirs:
            _emit(db, t)
        time.sleep(1.0)
        # not drained by the survivor while the victim's lease holds: ownership shares the work
        assert _launched(db, theirs) == len(theirs)
        _wait(lambda: _launched(db, theirs) == 2 * len(theirs), 3 * TIMEOUT)
        took = time.time() - killed
        assert took <= 2 * TIMEOUT, took  # membership timeout + one poll + execution
        keys = db["trigger_effects"].distinct("row_key")
        assert len(keys) == db["trigger_effects"].count_documents({})  # nothing doubled
        assert _launched(db, TENANTS) == len(TENANTS) + len(theirs)  # nothing lost
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        client.drop_database(name)
        client.close()
