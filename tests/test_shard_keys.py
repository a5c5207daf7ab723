"""S8: sharded-cluster readiness, checked on the statements the service really sends.

A service runs its hot path on the wire (events trickled over two tenants, launches, the
board-reflect projection, the poll net, the worker's claims and marks, the heartbeat with the
pauses, the keeper's gauges and status, the audit, the token saves, the series), with every
command it sends recorded by pymongo's command monitoring (as ``benchmarks/statement_log.py``
records them). Then every statement's filter on a collection ``docs/scaling.md`` shards must
constrain that collection's shard key (its first field, by equality or ``$in``: the statement
targets the shards that own those values), or be on the page's list of bounded scatters; an
insert's documents must carry the shard key. The two tables are read from the page itself, so
the page and the code cannot drift apart: a new statement that scatters fails here until it is
documented (or given its key).
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from benchmarks.statement_log import shape
from board_outbox.model.board import Card
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service

pytestmark = pytest.mark.anyio

PAGE = Path(__file__).resolve().parent.parent / "docs" / "scaling.md"
# commands that carry no filter on a collection's documents, or open the change stream (which
# reads the oplog, never a sharded collection: the page's change-stream section)
SKIPPED = {"getMore", "killCursors", "endSessions", "hello", "isMaster", "ismaster", "ping",
           "serverStatus", "buildInfo", "listIndexes", "createIndexes", "listCollections",
           "dropDatabase", "abortTransaction", "commitTransaction"}
FILTER = {"find": "filter", "count": "query", "distinct": "query", "findAndModify": "query"}


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    nxt = text.find("\n#", start + len(heading))
    return text[start:] if nxt < 0 else text[start:nxt]


def rows(table: str) -> Iterator[list[str]]:
    """The cells of each row of the markdown tables in ``table`` (header rows skipped)."""
    for line in table.splitlines():
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0].lower() in ("collection", "statement"):
            continue
        yield cells


def code(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


def shard_keys() -> dict[str, str | None]:
    """collection -> the first field of its shard key (None: unsharded), from the page."""
    out: dict[str, str | None] = {}
    for cells in rows(section(PAGE.read_text(), "### Shard keys")):
        (coll,), key = code(cells[0])[:1], code(cells[1])
        if not key:
            out[coll] = None
            continue
        m = re.match(r"\{\s*([A-Za-z_]+)\s*:", key[0])
        assert m, f"the shard key of {coll} does not parse: {key[0]}"
        out[coll] = m.group(1)
    return out


def scatters() -> set[tuple[str, str, str]]:
    """(command, collection, filter shape) of each documented bounded scatter."""
    out = set()
    for cells in rows(section(PAGE.read_text(), "### Bounded scatters")):
        cmd, coll, fields = code(cells[0])[0], code(cells[1])[0], code(cells[2])
        names = sorted(f.strip() for f in (fields[0] if fields else "").split(",") if f.strip())
        out.add((cmd, coll, ",".join(names)))
    return out


def statements(name: str, cmd: Mapping[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(command, collection, filter) of each statement of one command; an insert yields each
    document as its "filter" (it must carry the shard key)."""
    coll = cmd.get(name)
    if not isinstance(coll, str):
        return
    if name == "insert":
        for doc in cmd.get("documents") or ():
            yield "insert", coll, dict(doc)
    elif name in ("update", "delete"):
        for st in cmd.get("updates" if name == "update" else "deletes") or ():
            yield name, coll, dict(st.get("q") or {})
    elif name == "aggregate":
        stages = cmd.get("pipeline") or []
        if stages and "$changeStream" in stages[0]:
            return
        first = stages[0] if stages else {}
        yield "aggregate", coll, dict(first.get("$match", {}) if isinstance(first, dict) else {})
    elif name in FILTER:
        yield name, coll, dict(cmd.get(FILTER[name]) or {})


def targeted(flt: Mapping[str, Any], key: str) -> bool:
    """The filter pins ``key`` to values (equality or ``$in``), at the top or in every ``$or``
    branch: the statement goes to the shards owning those values only."""
    if key in flt:
        v = flt[key]
        return not isinstance(v, dict) or set(v) <= {"$eq", "$in"}
    ors = flt.get("$or")
    return isinstance(ors, list) and bool(ors) and all(
        isinstance(b, dict) and targeted({**flt, **b, "$or": None}, key) for b in ors)


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, Any], str]] = []

    def started(self, event: Any) -> None:
        if event.command_name in SKIPPED:
            return
        label = shape(event.command_name, event.command)
        for name, coll, flt in statements(event.command_name, event.command):
            self.seen.append((name, coll, flt, label))

    def succeeded(self, event: Any) -> None:
        pass

    def failed(self, event: Any) -> None:
        pass


async def run_hot_path(uri: str) -> Recorder:
    from pymongo import AsyncMongoClient, monitoring

    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo import ensure_schema, mongo_stores

    class Listener(Recorder, monitoring.CommandListener):
        pass

    rec = Listener()
    client: Any = AsyncMongoClient(uri, tz_aware=True, event_listeners=[rec])
    db = client[f"board_outbox_test_shard_{uuid.uuid4().hex[:8]}"]
    try:
        await ensure_schema(db)
        stores = mongo_stores(db, MemoryLauncher())
        tenants = ["acme", "globex"]
        for t in tenants:
            await stores.subs.put(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="b"))
            await stores.cards.put(Card(tenant_id=t, card_id="c", title="c"))  # type: ignore[attr-defined]
        cfg = load_config(
            env={}, tail={"poll_interval_seconds": 0.2, "stream_poll_interval_seconds": 0.5,
                          "seed": "earliest", "token_save_seconds": 0.2},
            worker={"idle_seconds": 0.05, "reclaim_every_seconds": 0.3},
            service={"metrics_interval_seconds": 0.3},
            membership={"heartbeat_timeout_seconds": 1.2},
            audit={"interval_seconds": 0.3})
        service = Service(stores, cfg, rng=random.Random(1))
        service.status_enabled = True  # the keeper's status refresh, as with the endpoints on
        await stores.pauses.pause("tenant", "initech", reason="", by="ops", at=1.0)  # type: ignore[union-attr]
        launcher = stores.launcher
        assert isinstance(launcher, MemoryLauncher)
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            with anyio.fail_after(30):
                while not service.stream_open:
                    await anyio.sleep(0.02)
                for i in range(6):
                    t = tenants[i % 2]
                    seq = await stores.events.allocate_seq(t)
                    await stores.events.insert({"tenant_id": t, "seq": seq,  # type: ignore[attr-defined]
                                                "type": "card.created", "card_id": "c", "at": 1.0})
                while len(launcher.launches) < 6:
                    await anyio.sleep(0.02)
                await anyio.sleep(1.5)  # the idle loops: poll net, claims, beats, gauges, audit
            await service.limits_pass()
            service.stop()
    finally:
        await client.drop_database(db.name)
        await client.close()
    return rec


@pytest.mark.live_mongo
async def test_every_hot_statement_targets_one_shard_or_is_a_documented_scatter(
        live_uri: str) -> None:
    keys, allowed = shard_keys(), scatters()
    assert {"board_events", "trigger_effects", "trigger_cursors"} <= {
        c for c, k in keys.items() if k}
    rec = await run_hot_path(live_uri)
    colls = {coll for _, coll, _, _ in rec.seen}
    assert {"board_events", "trigger_effects", "trigger_cursors", "board_event_counters",
            "board_outbox_members", "read_models"} <= colls, colls
    unknown = sorted(colls - set(keys))
    assert not unknown, f"collections the page gives no shard key (or 'unsharded'): {unknown}"
    bad: set[str] = set()
    used: set[tuple[str, str, str]] = set()
    for name, coll, flt, label in rec.seen:
        key = keys[coll]
        if key is None or targeted(flt, key):
            continue
        if name == "insert":
            bad.add(f"insert {coll}: a document without {key}")
            continue
        entry = (name, coll, ",".join(sorted(flt)))
        if entry in allowed:
            used.add(entry)
            continue
        bad.add(f"{name} {coll} {{{label}}}: no {key}, not on the page's scatter list")
    assert not bad, "\n".join(sorted(bad))
    # the list names what the service sends: an entry no statement matched is stale
    stale = allowed - used
    assert not stale, f"documented scatters the hot path never sent: {sorted(stale)}"


def test_the_pages_tables_parse() -> None:
    keys, allowed = shard_keys(), scatters()
    assert keys["board_events"] == "tenant_id" and keys["board_outbox_members"] is None
    assert all(cmd and coll in keys and keys[coll] for cmd, coll, _ in allowed)
    assert targeted({"tenant_id": "a", "seq": {"$gt": 1}}, "tenant_id")
    assert targeted({"_id": {"$in": ["a", "b"]}}, "_id")
    assert not targeted({"tenant_id": {"$nin": ["a"]}}, "tenant_id")
    assert targeted({"$or": [{"tenant_id": "a"}, {"tenant_id": "b", "x": 1}]}, "tenant_id")
    assert not targeted({"$or": [{"tenant_id": "a"}, {"x": 1}]}, "tenant_id")
