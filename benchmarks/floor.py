"""The bare-driver floor: the same job as ``board-outbox run``, written
straight against pymongo's ``AsyncMongoClient`` and aiohttp, none of our code. Run as its own
process, so that its whole-process CPU can be set beside the service's.

Per tenant, round-robin: up to 500 events after its cursor (one find), their cards in one
``$in``, one unordered bulk of ``$setOnInsert`` upserts (a launch row and a projection row per
event), the cursor CAS. Beside it, the worker: up to 20 pending rows (one find), one
``update_many`` claim, a keep-alive POST per launch row, one read-model bulk write for the
projection rows, one ``update_many`` done mark.

``python -m benchmarks.floor URI DATABASE RUNNER_URL ROWS`` exits once ROWS rows are done.

``python -m benchmarks.floor --follow URI DATABASE RUNNER_URL [--projection]`` is the latency
floor (``shortpath.py``; ``floor_follow.py``): it watches the change stream and runs
until SIGTERM.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from typing import Any

import aiohttp
from pymongo import AsyncMongoClient, UpdateOne
from pymongo.errors import BulkWriteError

from benchmarks.floor_schema import CARDS, CLAIM, CURSORS, EFFECTS, EVENT_BATCH, EVENTS, MODELS, SUBS, indexes


async def materialize(db: Any, tenants: list[str], stop: asyncio.Event) -> None:
    cursors = {t: 0 for t in tenants}
    subs = {t: await db[SUBS].find({"tenant_id": t}).to_list(None) for t in tenants}
    behind = set(tenants)
    while behind and not stop.is_set():
        for t in sorted(behind):
            events = await db[EVENTS].find({"tenant_id": t, "seq": {"$gt": cursors[t]}}).sort(
                "seq", 1).limit(EVENT_BATCH).to_list(None)
            if not events:
                behind.discard(t)
                continue
            ids = sorted({e["card_id"] for e in events})
            cards = {c["card_id"]: c for c in await db[CARDS].find(
                {"tenant_id": t, "card_id": {"$in": ids}}).to_list(None)}
            now = time.time()
            ops = []
            for e in events:
                card = cards.get(e["card_id"], {})
                snap = {"seq": e["seq"], "type": e["type"], "card_id": e["card_id"],
                        "at": e.get("at"), "title": card.get("title"), "column": card.get("column")}
                for sub in subs[t]:
                    key = f"{t}/{e['seq']}/sub/{sub['sub_id']}"
                    ops.append(UpdateOne({"row_key": key}, {"$setOnInsert": {
                        "row_key": key, "tenant_id": t, "seq": e["seq"], "kind": "launch",
                        "sub_id": sub["sub_id"], "bot": sub["bot"], "state": "pending",
                        "not_before": now, "created_at": now, "event": snap}}, upsert=True))
                key = f"{t}/{e['seq']}/projection/board-reflect"
                ops.append(UpdateOne({"row_key": key}, {"$setOnInsert": {
                    "row_key": key, "tenant_id": t, "seq": e["seq"], "kind": "projection",
                    "projection": "board-reflect", "state": "pending", "not_before": now,
                    "created_at": now, "event": snap}}, upsert=True))
            await db[EFFECTS].bulk_write(ops, ordered=False)
            last = events[-1]["seq"]
            await db[CURSORS].update_one({"_id": t, "seq": cursors[t]}, {"$set": {"seq": last}},
                                         upsert=cursors[t] == 0)
            cursors[t] = last


async def work(db: Any, runner: str, rows: int, stop: asyncio.Event) -> None:
    done = 0
    async with aiohttp.ClientSession() as http:
        while done < rows:
            picked = await db[EFFECTS].find({"state": "pending"}).limit(CLAIM).to_list(None)
            if not picked:
                await asyncio.sleep(0.01)
                continue
            ids = [d["_id"] for d in picked]
            claim_id = uuid.uuid4().hex
            now = time.time()
            await db[EFFECTS].update_many({"_id": {"$in": ids}, "state": "pending"}, {"$set": {
                "state": "claimed", "claim_id": claim_id, "lease_until": now + 30}})
            model_ops = []
            for d in picked:
                if d["kind"] == "launch":
                    async with http.post(runner, json={"row_key": d["row_key"],
                                                       "bot": d.get("bot")}) as resp:
                        await resp.read()
                else:
                    ev = d["event"]
                    model_ops.append(UpdateOne(  # upsert if newer: a stale one hits the key
                        {"model": "board-reflect", "tenant_id": d["tenant_id"],
                         "key": ev["card_id"], "seq": {"$lt": ev["seq"]}},
                        {"$set": {"seq": ev["seq"], "doc": ev}}, upsert=True))
            if model_ops:
                try:
                    await db[MODELS].bulk_write(model_ops, ordered=False)
                except BulkWriteError as exc:
                    if any(e.get("code") != 11000 for e in exc.details.get("writeErrors", [])):
                        raise
            await db[EFFECTS].update_many({"_id": {"$in": ids}, "claim_id": claim_id}, {"$set": {
                "state": "done", "updated_at": time.time()}})
            done += len(ids)
    stop.set()


async def main(uri: str, database: str, runner: str, rows: int) -> None:
    """The throughput floor: exits once ``rows`` rows are done."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    db = client[database]
    await indexes(db)
    tenants = sorted(await db[SUBS].distinct("tenant_id"))
    stop = asyncio.Event()
    print("ready", flush=True)
    sys.stdin.readline()  # the benchmark starts the clock, then says go
    await asyncio.gather(materialize(db, tenants, stop), work(db, runner, rows, stop))
    await client.close()


def cli(argv: list[str]) -> None:
    """``URI DATABASE RUNNER_URL ROWS`` (the throughput floor) or ``--follow URI DATABASE
    RUNNER_URL [--projection]`` (the latency floor)."""
    if argv[:1] == ["--follow"]:
        from benchmarks.floor_follow import follow_main

        asyncio.run(follow_main(argv[1], argv[2], argv[3], projection="--projection" in argv[4:]))
        return
    asyncio.run(main(argv[0], argv[1], argv[2], int(argv[3])))


if __name__ == "__main__":
    cli(sys.argv[1:])
