"""Projection read models (``read_models``) on MongoDB."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo.errors import DuplicateKeyError

from .errors import translated

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
