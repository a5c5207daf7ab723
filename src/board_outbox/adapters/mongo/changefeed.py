"""The change-stream feed on ``board_events`` (C1).

Watches inserts only, projecting the event's fields (those the event log's read returns: the
tail takes the next events from them instead of reading them again, issue 31), and
leaves out in the pipeline the tenants other replicas own (S5: ``$match`` on
``fullDocument.tenant_id``, so the server, or mongos on a sharded cluster, returns a replica only
the inserts it will act on). Resumes after the given token; a token the server can no longer
resume from (history lost, code 286, or an invalidate event) raises ``ChangeStreamLost`` so the
caller drops it, polls, and reopens.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Collection
from datetime import UTC, datetime
from typing import Any

from bson import Timestamp
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.read_concern import ReadConcern

from board_outbox.adapters.mongo.errors import HISTORY_LOST_CODES, classify, is_transient
from board_outbox.adapters.mongo.events import EVENT_FIELDS, EVENTS
from board_outbox.model.errors import ChangeStreamLost
from board_outbox.model.validation import OnceLog
from board_outbox.ports import Change

_once = OnceLog(logging.getLogger("board_outbox.changefeed"))

OPERATIONS = ["insert", "invalidate", "drop", "dropDatabase", "rename"]
PROJECT = {"$project": {"operationType": 1, **{
    f"fullDocument.{name}": 1 for name, keep in EVENT_FIELDS.items() if keep}}}
PIPELINE: list[dict[str, Any]] = [{"$match": {"operationType": {"$in": OPERATIONS}}}, PROJECT]


def pipeline(exclude: Collection[str] = ()) -> list[dict[str, Any]]:
    """The stream's pipeline: inserts (and the events that end a stream), without the inserts
    of the ``exclude`` tenants. The events that end a stream carry no document and always pass."""
    if not exclude:
        return PIPELINE
    match = {"$or": [
        {"operationType": {"$in": OPERATIONS[1:]}},
        {"operationType": "insert", "fullDocument.tenant_id": {"$nin": sorted(exclude)}},
    ]}
    return [{"$match": match}, PROJECT]


class MongoChangeFeed:
    def __init__(self, db: Any, max_await_ms: int = 1000) -> None:
        self.coll = db[EVENTS]
        self.max_await_ms = max_await_ms

    async def watch(
        self, resume_token: Any | None, *, exclude: Collection[str] = ()
    ) -> AsyncGenerator[Change, None]:
        try:
            stream = await self.coll.watch(
                pipeline(exclude), resume_after=resume_token, max_await_time_ms=self.max_await_ms
            )
            async with stream:
                while stream.alive:
                    change = await stream.try_next()
                    if change is None:
                        # a quiet batch: hand out the post-batch token, so a persisted token
                        # keeps up with the oplog even when nothing is inserted (S4)
                        yield Change("", 0, stream.resume_token)
                        continue
                    op = change.get("operationType")
                    if op != "insert":
                        raise ChangeStreamLost(f"change stream ended by a {op} event")
                    doc = change.get("fullDocument") or {}
                    tenant, seq = doc.get("tenant_id"), doc.get("seq")
                    if isinstance(tenant, str) and isinstance(seq, int):
                        yield Change(tenant, seq, stream.resume_token, doc)
                raise ChangeStreamLost("change stream closed by the server")
        except OperationFailure as exc:
            if exc.code in HISTORY_LOST_CODES:
                raise ChangeStreamLost(f"cannot resume: {exc}") from exc
            raise classify(exc, "change stream") from exc
        except PyMongoError as exc:
            raise classify(exc, "change stream") from exc

    async def history_start(self) -> float | None:
        """The first ``local.oplog.rs`` entry's wall time (its ``ts`` seconds on a server
        without ``wall``), read with read concern local (``local`` takes no other). One indexed
        read on mongod (the oplog's natural order). None, with one warning, when the server
        will not say (no clusterMonitor-like permission on ``local``, not a replica set)."""
        oplog = self.coll.database.client["local"].get_collection(
            "oplog.rs", read_concern=ReadConcern("local"))
        try:
            docs = await oplog.find({}, {"ts": 1, "wall": 1}).sort("$natural", 1).limit(1).to_list(None)
        except OperationFailure as exc:
            if is_transient(exc):
                raise classify(exc, "oplog window") from exc
            _once(("oplog", exc.code), logging.WARNING,
                  "cannot read the oplog window (%s): the history headroom is not reported", exc)
            return None
        except PyMongoError as exc:
            raise classify(exc, "oplog window") from exc
        if not docs:
            return None
        wall, ts = docs[0].get("wall"), docs[0].get("ts")
        if isinstance(wall, datetime):
            return (wall if wall.tzinfo else wall.replace(tzinfo=UTC)).timestamp()
        return float(ts.time) if isinstance(ts, Timestamp) else None
