"""An async face over ``mongomock`` with the subset of pymongo's ``AsyncDatabase`` /
``AsyncCollection`` API the Mongo adapters use, so the adapters run unchanged in CI.

Every operation yields to the event loop first, so concurrent tasks interleave between store
calls as they would against a server. Operations mongomock lacks raise loudly (NotImplementedError).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import mongomock
from anyio.lowlevel import checkpoint
from pymongo import DeleteMany, DeleteOne, InsertOne, ReplaceOne, UpdateMany, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure


class BulkResult:
    def __init__(self, upserted: int, matched: int, inserted: int,
                 upserted_ids: dict[int, Any] | None = None, modified: int = 0) -> None:
        self.upserted_count = upserted
        self.upserted_ids = upserted_ids or {}  # statement index -> _id, as pymongo's
        self.matched_count = matched
        self.modified_count = modified
        self.inserted_count = inserted
        self.acknowledged = True


class AsyncCursor:
    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def sort(self, key: Any, direction: int | None = None) -> AsyncCursor:
        self._cursor = self._cursor.sort(key, direction) if direction else self._cursor.sort(key)
        return self

    def limit(self, n: int) -> AsyncCursor:
        self._cursor = self._cursor.limit(n)
        return self

    def hint(self, index: Any) -> AsyncCursor:
        self._cursor = self._cursor.hint(index)  # mongomock ignores it
        return self

    def batch_size(self, n: int) -> AsyncCursor:
        self._cursor = self._cursor.batch_size(n)
        return self

    async def to_list(self, length: int | None = None) -> list[dict[str, Any]]:
        await checkpoint()
        docs = list(self._cursor)
        return docs if length is None else docs[:length]

    def __aiter__(self) -> AsyncCursor:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            return next(self._cursor)  # type: ignore[no-any-return]
        except StopIteration:
            raise StopAsyncIteration from None


class AsyncMockCollection:
    def __init__(self, coll: mongomock.Collection) -> None:
        self._c = coll

    def find(self, *args: Any, **kwargs: Any) -> AsyncCursor:
        return AsyncCursor(self._c.find(*args, **kwargs))

    async def aggregate(self, pipeline: list[dict[str, Any]], **kwargs: Any) -> AsyncCursor:
        await checkpoint()
        return AsyncCursor(iter(self._aggregate(list(pipeline), **kwargs)))

    def _aggregate(self, pipeline: list[dict[str, Any]], **kwargs: Any) -> list[dict[str, Any]]:
        """mongomock's aggregate, plus ``$unionWith`` (which it lacks): the stages before it
        run here, the other collection's sub-pipeline there, and the rest over both outputs
        (held in a scratch collection, each document wrapped so equal ``_id``s can meet)."""
        at = next((i for i, stage in enumerate(pipeline) if "$unionWith" in stage), None)
        if at is None:
            return list(self._c.aggregate(pipeline, **kwargs)) if pipeline else \
                list(self._c.find())
        docs = self._aggregate(pipeline[:at])
        rest = pipeline[at:]
        while rest and "$unionWith" in rest[0]:
            spec = rest.pop(0)["$unionWith"]
            name, sub = (spec, []) if isinstance(spec, str) else (spec["coll"],
                                                                 spec.get("pipeline", []))
            docs += AsyncMockCollection(self._c.database[name])._aggregate(list(sub))
        scratch = self._c.database[f"__union_{uuid.uuid4().hex}"]
        try:
            if docs:
                scratch.insert_many([{"_id": i, "d": d} for i, d in enumerate(docs)])
            return AsyncMockCollection(scratch)._aggregate(
                [{"$replaceRoot": {"newRoot": "$d"}}, *rest], **kwargs)
        finally:
            scratch.drop()

    async def bulk_write(self, requests: Sequence[Any], ordered: bool = True) -> BulkResult:
        # mongomock's own bulk_write does not accept current pymongo operation objects.
        await checkpoint()
        upserted = matched = inserted = modified = 0
        ids: dict[int, Any] = {}
        errors: list[dict[str, Any]] = []
        for i, op in enumerate(requests):
            try:
                if isinstance(op, (UpdateOne, UpdateMany)):
                    fn = self._c.update_one if isinstance(op, UpdateOne) else self._c.update_many
                    r = self._atomic(fn, (op._filter, op._doc), {"upsert": op._upsert})
                    matched += r.matched_count
                    modified += r.modified_count
                    if r.upserted_id is not None:
                        upserted, ids[i] = upserted + 1, r.upserted_id
                elif isinstance(op, ReplaceOne):
                    r = self._c.replace_one(op._filter, op._doc, upsert=op._upsert)
                    matched += r.matched_count
                    if r.upserted_id is not None:
                        upserted, ids[i] = upserted + 1, r.upserted_id
                elif isinstance(op, InsertOne):
                    self._c.insert_one(op._doc)
                    inserted += 1
                elif isinstance(op, (DeleteOne, DeleteMany)):
                    raise NotImplementedError(f"bulk {type(op).__name__} is not needed here")
                else:
                    raise NotImplementedError(type(op).__name__)
            except DuplicateKeyError as exc:
                errors.append({"index": i, "code": 11000, "errmsg": str(exc)})
                if ordered:
                    break
            except OperationFailure as exc:  # a document refused the update (``_atomic``)
                errors.append({"index": i, "code": exc.code, "errmsg": str(exc)})
                if ordered:
                    break
        if errors:
            raise BulkWriteError({"writeErrors": errors, "writeConcernErrors": [],
                                  "nUpserted": upserted, "nMatched": matched,
                                  "nInserted": inserted,
                                  "upserted": [{"index": i, "_id": v} for i, v in ids.items()]})
        return BulkResult(upserted, matched, inserted, ids, modified)

    async def create_indexes(self, models: Sequence[Any]) -> list[str]:
        # mongomock's create_indexes drops partialFilterExpression; create_index keeps it.
        await checkpoint()
        names = []
        for model in models:
            spec = dict(model.document)
            keys = list(spec.pop("key").items())
            names.append(self._c.create_index(keys, **spec))
        return names

    async def watch(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("mongomock has no change streams: those tests need a replica set")

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._c, name)
        if not callable(fn):
            return fn

        async def call(*args: Any, **kwargs: Any) -> Any:
            await checkpoint()
            if not name.startswith(("update", "find_one_and")):
                return fn(*args, **kwargs)
            kwargs.pop("hint", None)  # mongomock refuses a write's hint; it has no planner
            return self._atomic(fn, args, kwargs)

        return call

    def _atomic(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """An update as the server runs it: mongomock applies ``$inc`` to a string / ``$push``
        to a non-array as Python would, part of the update already applied; the server refuses
        the document's update whole (code 14 / 2). The documents it matched are put back as they
        were, and the refusal said the way the server says it."""
        flt = args[0] if args else kwargs.get("filter", {})
        before = list(self._c.find(flt))
        try:
            return fn(*args, **kwargs)
        except (TypeError, AttributeError) as exc:
            for doc in before:
                self._c.replace_one({"_id": doc["_id"]}, doc)
            raise OperationFailure(f"mongomock: {exc}", code=14) from exc


class AsyncMockDatabase:
    def __init__(self, db: mongomock.Database) -> None:
        self._db = db
        self.name = db.name

    def __getitem__(self, name: str) -> AsyncMockCollection:
        return AsyncMockCollection(self._db[name])

    async def list_collection_names(self) -> list[str]:
        return list(self._db.list_collection_names())

    async def command(self, name: str, value: Any = 1, **kwargs: Any) -> dict[str, Any]:
        """``collMod`` of an index's ``expireAfterSeconds`` (the TTL following the retention,
        O8), which mongomock lacks; any other command raises loudly."""
        await checkpoint()
        index = kwargs.get("index", {})
        if name != "collMod" or set(index) != {"name", "expireAfterSeconds"}:
            raise NotImplementedError(f"mongomock_async: command {name!r} {kwargs!r}")
        store = self._db[value]._store
        if index["name"] not in store.indexes:
            raise OperationFailure(f"cannot find index {index['name']}", code=27)
        for held in (store.indexes, store._ttl_indexes):
            if index["name"] in held:
                held[index["name"]]["expireAfterSeconds"] = index["expireAfterSeconds"]
        return {"ok": 1.0}


def mock_database(name: str = "board_outbox_test") -> AsyncMockDatabase:
    return AsyncMockDatabase(mongomock.MongoClient(tz_aware=True)[name])
