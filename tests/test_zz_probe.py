import anyio, pytest
from typing import Any

@pytest.mark.anyio
@pytest.mark.live_mongo
async def test_probe(live_db: Any) -> None:
    from board_outbox.adapters.mongo.changefeed import MongoChangeFeed
    other = live_db["other"]
    s = await other.watch()
    await other.insert_one({"x": 1})
    async with s:
        ch = await s.try_next()
        while ch is None:
            ch = await s.try_next()
        other_tok = s.resume_token
    print("other token", other_tok)
    feed = MongoChangeFeed(live_db)
    for tok in [{"_data": "garbage"}, {"_data": "8263"}, other_tok, "stringtoken", {"x": 1}]:
        try:
            with anyio.fail_after(5):
                async for ch in feed.watch(tok):
                    print("TOKEN", tok, "->", ch)
                    break
        except Exception as exc:
            print("TOKEN", tok, "->", type(exc).__name__, exc, getattr(exc.__cause__, "code", None))
    # many $or clauses
    await live_db["board_events"].insert_one({"tenant_id": "a", "seq": 1, "at": 5.0})
    clauses = [{"tenant_id": f"t{i}", "seq": {"$gt": 0, "$lte": 64}} for i in range(20000)] + [{"tenant_id": "a", "seq": {"$gt": 0, "$lte": 64}}]
    import time; t=time.time()
    cur = await live_db["board_events"].aggregate([{"$match": {"$or": clauses}}, {"$sort": {"tenant_id": 1, "seq": 1}}, {"$group": {"_id": "$tenant_id", "at": {"$first": "$at"}}}])
    print("OR result", await cur.to_list(None), time.time()-t)
