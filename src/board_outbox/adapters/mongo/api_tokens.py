"""``board_outbox_api_tokens`` on MongoDB (A8): the JSON API's bearer tokens, one document per
token, ``_id`` its public id; the secret's hash only. A revocation is kept (``revoked_at``)."""

from __future__ import annotations

from typing import Any

import msgspec
from pymongo import ASCENDING

from board_outbox.adapters.mongo.errors import translated
from board_outbox.model.api_tokens import API_TOKENS_COLLECTION, ApiToken, parse_token

API_TOKENS = API_TOKENS_COLLECTION


class MongoApiTokenStore:
    def __init__(self, db: Any) -> None:
        self.coll = db[API_TOKENS]

    @translated
    async def create(self, token: ApiToken) -> None:
        doc = msgspec.to_builtins(token)
        doc["_id"] = doc.pop("token_id")
        await self.coll.insert_one(doc)

    @translated
    async def get(self, token_id: str) -> ApiToken | None:
        doc = await self.coll.find_one({"_id": token_id})
        return None if doc is None else parse_token(token_id, doc)

    @translated
    async def all(self) -> list[ApiToken]:
        docs = await self.coll.find({}).sort([("_id", ASCENDING)]).to_list(10_000)
        got = [parse_token(str(d["_id"]), d) for d in docs]
        return sorted((t for t in got if t is not None), key=lambda t: t.created_at)

    @translated
    async def revoke(self, token_id: str, at: float, by: str) -> bool:
        res = await self.coll.update_one({"_id": token_id, "revoked_at": None},
                                         {"$set": {"revoked_at": at, "revoked_by": by}})
        return bool(res.modified_count == 1)
