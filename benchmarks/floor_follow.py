"""The latency floor: the short path of ``board-outbox run`` -- an insert woken by the
change stream, its launch POSTed, the row marked done -- written straight against pymongo's
``AsyncMongoClient`` and aiohttp, none of our code, in its own process (so that its whole-process
CPU can be set beside the service's, ``shortpath.py``).

The change stream on ``board_events`` (inserts, tenant and seq projected, as the service's
feed asks for them) marks a tenant dirty. For each dirty tenant, one batch, in order:

1. the events after the tenant's cursor (one ``find``, up to 500, the fields the service reads);
2. their cards in one ``$in`` on ``_id``;
3. one unordered bulk of ``$setOnInsert`` upserts: a launch row per subscription and event (and
   a ``board-reflect`` projection row per event with ``--projection``);
4. the cursor CAS (``{_id: tenant, seq: cursor}`` -> the batch's last seq);
5. a fenced claim of the batch's rows (``update_many`` pending -> claimed with a new claim id);
6. the POSTs, one per launch row, on one keep-alive session (and one read-model bulk write for
   the projection rows);
7. a fenced done mark (``update_many`` on the claim id).

So a trickle pays five round trips before its POST (steps 1-5), plus the stream's wake; a
backlog batches by itself (up to 500 events per tenant per round). The subscriptions are read
once at start, the cursors kept in memory (one process, no other writer). Reads and writes use
majority concerns, as the service's store does by default.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections import defaultdict
from typing import Any

import aiohttp
from pymongo import AsyncMongoClient, UpdateOne

from benchmarks.floor_schema import CARDS, CURSORS, EFFECTS, EVENT_BATCH, EVENTS, MODELS, SUBS, indexes

STREAM: list[dict[str, Any]] = [{"$match": {"operationType": "insert"}},
          {"$project": {"operationType": 1, "fullDocument.tenant_id": 1, "fullDocument.seq": 1}}]
EVENT_FIELDS = {"_id": 0, "tenant_id": 1, "seq": 1, "type": 1, "card_id": 1, "at": 1}
LEASE = 30.0


class Follower:
    def __init__(self, db: Any, runner: str, projection: bool) -> None:
        self.db, self.runner, self.projection = db, runner, projection
        self.subs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.cursors: dict[str, int] = {}
        self.dirty: set[str] = set()
        self.wake = asyncio.Event()

    async def start(self) -> None:
        for sub in await self.db[SUBS].find({}).to_list(None):
            self.subs[sub["tenant_id"]].append(sub)
        self.cursors = dict.fromkeys(self.subs, 0)
        self.dirty = set(self.subs)  # whatever was inserted before the stream opened
        self.wake.set()

    async def watch(self, stream: Any) -> None:
        async for change in stream:
            tenant = (change.get("fullDocument") or {}).get("tenant_id")
            if tenant in self.cursors:
                self.dirty.add(tenant)
                self.wake.set()

    async def drain(self, http: aiohttp.ClientSession) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.dirty:
                for tenant in sorted(self.dirty):
                    self.dirty.discard(tenant)
                    if await self.batch(http, tenant) == EVENT_BATCH:
                        self.dirty.add(tenant)

    async def batch(self, http: aiohttp.ClientSession, tenant: str) -> int:
        db, cursor = self.db, self.cursors[tenant]
        events = await (db[EVENTS].find({"tenant_id": tenant, "seq": {"$gt": cursor}}, EVENT_FIELDS)
                        .sort("seq", 1).limit(EVENT_BATCH).to_list(None))
        if not events:
            return 0
        ids = sorted({f"{tenant}/{e['card_id']}" for e in events})
        cards = {c["_id"]: c for c in await db[CARDS].find({"_id": {"$in": ids}}).to_list(None)}
        now = time.time()
        rows: list[dict[str, Any]] = []
        for e in events:
            card = cards.get(f"{tenant}/{e['card_id']}", {})
            snap = {**e, "title": card.get("title"), "column": card.get("column")}
            base = {"tenant_id": tenant, "seq": e["seq"], "state": "pending", "not_before": now,
                    "created_at": now, "event": snap}
            for sub in self.subs[tenant]:
                rows.append({**base, "row_key": f"{tenant}/{e['seq']}/sub/{sub['sub_id']}",
                             "kind": "launch", "sub_id": sub["sub_id"], "bot": sub["bot"]})
            if self.projection:
                rows.append({**base, "row_key": f"{tenant}/{e['seq']}/projection/board-reflect",
                             "kind": "projection", "projection": "board-reflect"})
        keys = [r["row_key"] for r in rows]
        await db[EFFECTS].bulk_write([UpdateOne({"row_key": r["row_key"]}, {"$setOnInsert": r},
                                                upsert=True) for r in rows], ordered=False)
        last = events[-1]["seq"]
        cas = await db[CURSORS].update_one({"_id": tenant, "seq": cursor}, {"$set": {"seq": last}},
                                           upsert=cursor == 0)
        if cas.matched_count == 0 and cas.upserted_id is None:
            raise RuntimeError(f"cursor CAS lost for {tenant}: another writer?")
        self.cursors[tenant] = last
        claim_id = uuid.uuid4().hex
        await db[EFFECTS].update_many({"row_key": {"$in": keys}, "state": "pending"}, {"$set": {
            "state": "claimed", "claim_id": claim_id, "lease_until": time.time() + LEASE}})
        model_ops = []
        for r in rows:
            if r["kind"] == "launch":
                body = {"tenant_id": tenant, "seq": r["seq"], "row_key": r["row_key"],
                        "bot": r["bot"], "sub_id": r["sub_id"], "card_id": r["event"]["card_id"]}
                async with http.post(self.runner, json=body) as resp:
                    await resp.read()
            else:
                ev = r["event"]
                model_ops.append(UpdateOne(
                    {"model": "board-reflect", "tenant_id": tenant, "key": ev["card_id"],
                     "seq": {"$lt": ev["seq"]}}, {"$set": {"seq": ev["seq"], "doc": ev}},
                    upsert=True))
        if model_ops:
            await db[MODELS].bulk_write(model_ops, ordered=False)
        await db[EFFECTS].update_many({"row_key": {"$in": keys}, "claim_id": claim_id}, {"$set": {
            "state": "done", "updated_at": time.time()}})
        return len(events)


async def follow_main(uri: str, database: str, runner: str, *, projection: bool) -> None:
    """Follow the stream until SIGTERM; print ``ready`` once the stream is open."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        uri, w="majority", readConcernLevel="majority")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        db = client[database]
        await indexes(db)
        follower = Follower(db, runner, projection)
        await follower.start()
        stream = await db[EVENTS].watch(STREAM, max_await_time_ms=1000)
        async with stream, aiohttp.ClientSession() as http:
            print("ready", flush=True)
            tasks = [asyncio.create_task(follower.watch(stream)),
                     asyncio.create_task(follower.drain(http))]
            stopping = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait([*tasks, stopping], return_when=asyncio.FIRST_COMPLETED)
            for task in (*tasks, stopping):
                task.cancel()
            for task in done:  # a pipeline task that ended by itself failed: say so
                if task is not stopping and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
    finally:
        await client.close()
