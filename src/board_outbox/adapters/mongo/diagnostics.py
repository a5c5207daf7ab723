"""What ``board-outbox doctor`` asks the server (O7): one small read per question, each
answering plain facts (``model/diagnosis``) or raising ``StoreError``/``StoreUnavailable``
with the server's one-line reason. Judging the answers is the doctor's (``surface/doctor``)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from bson import Timestamp
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.read_concern import ReadConcern

from board_outbox.adapters.mongo.errors import classify, translated
from board_outbox.adapters.mongo.events import EVENTS
from board_outbox.model.diagnosis import IndexFacts, OplogFacts, Privilege, ServerFacts

__all__ = ["MongoProbe"]

NAMESPACE_NOT_FOUND = 26


def _epoch(value: object) -> float | None:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return None


class MongoProbe:
    """The doctor's questions to one database's server."""

    def __init__(self, client: Any, database: str) -> None:
        self.client, self.db = client, client[database]

    @translated
    async def server(self) -> ServerFacts:
        """``hello`` (timed: the clock check's round trip) and ``buildInfo``."""
        sent = time.time()
        hello = await self.client.admin.command("hello")
        back = time.time()
        try:
            version = str((await self.client.admin.command("buildInfo")).get("version", "?"))
        except OperationFailure:
            version = "?"
        return ServerFacts(
            version=version, set_name=hello.get("setName"),
            writable_primary=bool(hello.get("isWritablePrimary", hello.get("ismaster"))),
            primary=hello.get("primary") or hello.get("me"), sent_at=sent, received_at=back,
            server_time=_epoch(hello.get("localTime")),
            max_wire_version=int(hello.get("maxWireVersion", 0)))

    @translated
    async def change_stream(self) -> None:
        """Open a change stream on ``board_events`` and close it (raises what the server says)."""
        stream = await self.db[EVENTS].watch(max_await_time_ms=10)
        try:
            await stream.try_next()
        finally:
            await stream.close()

    @translated
    async def privileges(self) -> tuple[list[str], list[Privilege]]:
        """The authenticated users and their privileges (``connectionStatus``)."""
        status = await self.client.admin.command("connectionStatus", showPrivileges=True)
        info = status.get("authInfo", {})
        users = [f"{u.get('user')}@{u.get('db')}" for u in info.get("authenticatedUsers", [])]
        out = []
        for p in info.get("authenticatedUserPrivileges", []):
            res = p.get("resource", {})
            out.append(Privilege(db=res.get("db"), collection=res.get("collection"),
                                 any_resource=bool(res.get("anyResource")),
                                 cluster=bool(res.get("cluster")),
                                 actions=sorted(str(a) for a in p.get("actions", []))))
        return users, out

    @translated
    async def indexes(self, collections: list[str]) -> dict[str, list[IndexFacts]]:
        """Each collection's indexes (a collection that does not exist yet: none)."""
        out: dict[str, list[IndexFacts]] = {}
        for name in collections:
            try:
                found = await (await self.db[name].list_indexes()).to_list(None)
            except OperationFailure as exc:
                if exc.code != NAMESPACE_NOT_FOUND:
                    raise
                found = []
            out[name] = [IndexFacts(
                name=str(i.get("name")), key=[(str(k), v) for k, v in dict(i.get("key", {})).items()],
                unique=bool(i.get("unique", False)),
                partial=dict(i["partialFilterExpression"]) if "partialFilterExpression" in i else None,
                expire_after_seconds=i.get("expireAfterSeconds")) for i in found]
        return out

    async def oplog(self) -> OplogFacts:
        """The oplog's first and last entries' wall times and how full it is (read concern
        local, the only one ``local`` takes). Raises ``StoreError`` when the server will not
        say (no read on ``local``, not a replica set)."""
        oplog = self.client["local"].get_collection("oplog.rs", read_concern=ReadConcern("local"))
        try:
            first = await oplog.find({}, {"ts": 1, "wall": 1}).sort("$natural", 1).limit(1).to_list(None)
            last = await oplog.find({}, {"ts": 1, "wall": 1}).sort("$natural", -1).limit(1).to_list(None)
        except PyMongoError as exc:
            raise classify(exc, "oplog") from exc
        try:  # how full it is: a server that will not say leaves it unknown
            stats = await self.client["local"].command("collStats", "oplog.rs")
        except OperationFailure:
            stats = {}
        capped = bool(stats.get("capped"))
        size, max_size = stats.get("size"), stats.get("maxSize")
        full = None
        if capped and isinstance(size, (int, float)) and isinstance(max_size, (int, float)) \
                and max_size > 0:
            full = size >= 0.9 * max_size
        from board_outbox.adapters.mongo.tokens import MongoResumeTokenStore

        try:
            saved = await MongoResumeTokenStore(self.db).saved_at()
        except PyMongoError:  # the token is a nicety here: the window is the finding
            saved = None
        return OplogFacts(first=_wall(first[0]) if first else None, token_saved_at=saved,
                          last=_wall(last[0]) if last else None, full=full,
                          size_bytes=size if isinstance(size, (int, float)) else None,
                          max_bytes=max_size if isinstance(max_size, (int, float)) else None)


def _wall(doc: dict[str, Any]) -> float | None:
    wall = _epoch(doc.get("wall"))
    if wall is not None:
        return wall
    ts = doc.get("ts")
    return float(ts.time) if isinstance(ts, Timestamp) else None
