"""The change-stream feed: one stream per replica, on the database (C1, S5, S6).

One ``$changeStream`` on the database, whose ``$match`` keeps two namespaces: the inserts into
``board_events`` (projecting the event's fields, those the event log's read returns: the tail
takes the next events from them instead of reading them again), less the inserts of
the tenants other replicas own (S5: ``$match`` on ``fullDocument.tenant_id``, so the server, or
mongos on a sharded cluster, returns a replica only the inserts it will act on); and every write
to ``trigger_subscriptions`` (the subscription cache starts over at each). Before, each replica
held two streams, one per collection, and every open stream costs the server a wake and a scan
of each new oplog entry: one stream halves that, whatever the replica count.

The caller paces the stream (``pace``, S6): it is awaited before each getMore, and only once the
changes a batch brought are handed out, so a replica busy with what it already knows does not
read its stream once per write.

Resumes after the given token; a token the server can no longer resume from (history lost,
code 286, or an invalidate event) or the events collection dropped or renamed raises
``ChangeStreamLost`` so the caller drops it, polls, and reopens.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection
from datetime import UTC, datetime
from typing import Any

from bson import Timestamp
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.read_concern import ReadConcern

from board_outbox.adapters.mongo.errors import HISTORY_LOST_CODES, classify, is_transient
from board_outbox.adapters.mongo.events import EVENT_FIELDS, EVENTS
from board_outbox.adapters.mongo.subscriptions import SUBSCRIPTIONS
from board_outbox.model.bad_documents import OnceLog
from board_outbox.model.errors import ChangeStreamLost
from board_outbox.ports import Change

_once = OnceLog(logging.getLogger("board_outbox.changefeed"))

# the operations that end what a stream of board_events can vouch for: the collection gone or
# renamed, the database dropped, the stream invalidated
ENDINGS = ["invalidate", "drop", "dropDatabase", "rename"]
PROJECT = {"$project": {"operationType": 1, "ns.coll": 1, **{
    f"fullDocument.{name}": 1 for name, keep in EVENT_FIELDS.items() if keep}}}


def pipeline(exclude: Collection[str] = ()) -> list[dict[str, Any]]:
    """The stream's pipeline: inserts into the events (without those of the ``exclude``
    tenants), every write to the subscriptions, and the events that end a stream (they carry
    no document and always pass)."""
    inserts: dict[str, Any] = {"ns.coll": EVENTS, "operationType": "insert"}
    if exclude:
        inserts["fullDocument.tenant_id"] = {"$nin": sorted(exclude)}
    match = {"$or": [
        inserts,
        {"ns.coll": SUBSCRIPTIONS},
        {"ns.coll": EVENTS, "operationType": {"$in": ENDINGS}},
        {"operationType": {"$in": ["invalidate", "dropDatabase"]}},
    ]}
    return [{"$match": match}, PROJECT]


def buffered(stream: Any) -> bool | None:
    """Whether the stream still holds changes of its last batch (the next one needs no getMore);
    None when the driver does not say (then the stream is not paced)."""
    has_next = getattr(getattr(stream, "_cursor", None), "_has_next", None)
    return bool(has_next()) if callable(has_next) else None


# how long a getMore waits for a change (the server returns at once when one comes): an idle
# replica's stream costs one getMore per this, and a quiet batch's token comes this often
MAX_AWAIT_MS = 2000


def await_budget_ms(db: Any, wanted: int = MAX_AWAIT_MS) -> int:
    """``wanted``, but at most half the client's operation timeout (a getMore must answer
    within it: the driver refuses a wait as long as the timeout)."""
    timeout = getattr(getattr(getattr(db, "client", None), "options", None), "timeout", None)
    if isinstance(timeout, int | float) and timeout > 0:
        return max(1, min(wanted, int(timeout * 1000 / 2)))
    return wanted


class MongoChangeFeed:
    def __init__(self, db: Any, max_await_ms: int | None = None) -> None:
        self.db = db
        self.coll = db[EVENTS]
        self.max_await_ms = max_await_ms or await_budget_ms(db)

    async def watch(
        self, resume_token: Any | None, *, exclude: Collection[str] = (),
        pace: Callable[[], Awaitable[None]] | None = None,
    ) -> AsyncGenerator[Change, None]:
        try:
            stream = await self.db.watch(
                pipeline(exclude), resume_after=resume_token, max_await_time_ms=self.max_await_ms
            )
            async with stream:
                # established: every change committed from here on is delivered
                yield Change("", 0, stream.resume_token)
                while stream.alive:
                    if pace is not None and buffered(stream) is False:
                        await pace()
                    change = await stream.try_next()
                    if change is None:
                        # a quiet batch: hand out the post-batch token, so a persisted token
                        # keeps up with the oplog even when nothing is inserted (S4)
                        yield Change("", 0, stream.resume_token)
                        continue
                    op = change.get("operationType")
                    coll = (change.get("ns") or {}).get("coll")
                    if coll == SUBSCRIPTIONS and op not in ("invalidate", "dropDatabase"):
                        yield Change("", 0, stream.resume_token, subscriptions=True)
                        continue
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
