"""Projection read models (``read_models``) on MongoDB."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError

from board_outbox.adapters.mongo.errors import translated
from board_outbox.ports import PushRecent, ReadModelOp, ReadModelWrites

DUPLICATE_KEY = 11000

READ_MODELS = "read_models"


class MongoReadModelStore:
    def __init__(self, db: Any) -> None:
        self.coll = db[READ_MODELS]

    @staticmethod
    def _id(model: str, tenant_id: str, key: str) -> str:
        return f"{model}/{tenant_id}/{key}"

    @translated
    async def upsert_if_newer(
        self, model: str, tenant_id: str, key: str, seq: int, doc: Mapping[str, Any]
    ) -> bool:
        _id = self._id(model, tenant_id, key)
        try:
            await self.coll.update_one(
                {"_id": _id, "last_seq": {"$lt": seq}},
                {"$set": {**doc, "model": model, "tenant_id": tenant_id, "key": key,
                          "last_seq": seq}},
                upsert=True,
            )
        except DuplicateKeyError:
            return False  # a document with a newer (or the same) seq is already there
        return True

    def _op(self, model: str, tenant_id: str, op: ReadModelOp) -> UpdateOne:
        _id = self._id(model, tenant_id, op.key)
        if isinstance(op, PushRecent):
            return UpdateOne(
                {"_id": _id, f"{op.field}.seq": {"$ne": op.seq}},
                {"$push": {op.field: {"$each": [{**op.entry, "seq": op.seq}], "$sort": {"seq": -1},
                                      "$slice": op.keep}},
                 "$max": {"last_seq": op.seq},
                 "$setOnInsert": {"model": model, "tenant_id": tenant_id, "key": op.key}},
                upsert=True,
            )
        return UpdateOne(
            {"_id": _id, "last_seq": {"$lt": op.seq}},
            {"$set": {**op.doc, "model": model, "tenant_id": tenant_id, "key": op.key,
                      "last_seq": op.seq}},
            upsert=True,
        )

    @translated
    async def write_many(self, model: str, tenant_id: str, ops: Sequence[ReadModelOp]) -> list[bool]:
        """``write_groups`` of one group."""
        return (await self._write_groups([ReadModelWrites(model, tenant_id, ops)]))[0]

    @translated
    async def write_groups(self, groups: Sequence[ReadModelWrites]) -> list[list[bool]]:
        """One unordered ``bulk_write`` for every group's ops. Each op's filter excludes a
        document that already holds its event (or a newer one), so its upsert then hits the
        unique ``_id``: not applied. Two replicas (or two ops of one batch) creating the same
        new document race the same way, so ops refused with a duplicate key go once more in a
        second bulk write: the document exists by then, and a second refusal really means
        stale."""
        return await self._write_groups(groups)

    async def _write_groups(self, groups: Sequence[ReadModelWrites]) -> list[list[bool]]:
        requests = [self._op(g.model, g.tenant_id, op) for g in groups for op in g.ops]
        ok = [True] * len(requests)
        todo = list(range(len(requests)))
        for attempt in range(2):
            refused = await self._bulk([requests[i] for i in todo])
            todo = [todo[j] for j in refused]
            if not todo:
                break
            if attempt == 1:
                for i in todo:
                    ok[i] = False
        out: list[list[bool]] = []
        at = 0
        for g in groups:
            out.append(ok[at:at + len(g.ops)])
            at += len(g.ops)
        return out

    async def _bulk(self, requests: list[UpdateOne]) -> list[int]:
        """Indexes of the requests refused with a duplicate key; any other error raises."""
        if not requests:
            return []
        try:
            await self.coll.bulk_write(requests, ordered=False)
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if exc.details.get("writeConcernErrors") or any(e.get("code") != DUPLICATE_KEY for e in errors):
                raise
            return sorted(int(e["index"]) for e in errors)
        return []

    @translated
    async def get(self, model: str, tenant_id: str, key: str) -> dict[str, Any] | None:
        return await self.coll.find_one({"_id": self._id(model, tenant_id, key)}, {"_id": 0, "model": 0})  # type: ignore[no-any-return]

    @translated
    async def list(self, model: str, tenant_id: str) -> list[dict[str, Any]]:
        cursor = self.coll.find({"model": model, "tenant_id": tenant_id}, {"_id": 0, "model": 0})
        return list(await cursor.sort("key", 1).to_list(None))

    @translated
    async def reset(self, model: str, tenant_id: str) -> int:
        res = await self.coll.delete_many({"model": model, "tenant_id": tenant_id})
        return int(res.deleted_count)
