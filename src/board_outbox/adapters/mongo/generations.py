"""Generation pointers, one per (model, tenant) read model (B3 shadow rebuilds), in the
``read_model_versions`` collection (its stored name, kept for existing deployments).
The swap is one conditional update of one document, so it is atomic."""

from __future__ import annotations

from typing import Any

from pymongo.errors import DuplicateKeyError

from board_outbox.adapters.mongo.errors import translated
from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.service_documents import parse_generation
from board_outbox.ports import ReadModelVersions

READ_MODEL_VERSIONS = "read_model_versions"


def _fields(v: ReadModelVersions) -> dict[str, Any]:
    return {"active": v.active, "building": v.building, "progress": v.progress}


class MongoGenerationStore:
    def __init__(self, db: Any) -> None:
        self.coll = db[READ_MODEL_VERSIONS]

    @staticmethod
    def _id(model: str, tenant_id: str) -> str:
        return f"{model}/{tenant_id}"

    @staticmethod
    def _decode(doc: dict[str, Any]) -> ReadModelVersions:
        """One pointer, parsed on its own (R1): a bad one is reported once and comes back with
        ``problem`` set, so only its own read model's writes fail."""
        v = parse_generation(doc)
        if v.problem is not None:
            BAD_DOCUMENTS.report(READ_MODEL_VERSIONS, doc.get("_id"), v.problem)
        return v

    @translated
    async def get(self, model: str, tenant_id: str) -> ReadModelVersions:
        doc = await self.coll.find_one({"_id": self._id(model, tenant_id)})
        return ReadModelVersions() if doc is None else self._decode(doc)

    @translated
    async def all(self) -> dict[tuple[str, str], ReadModelVersions]:
        out: dict[tuple[str, str], ReadModelVersions] = {}
        for doc in await self.coll.find({}).to_list(None):
            _id = doc.get("_id")
            model, sep, tenant = _id.rpartition("/") if isinstance(_id, str) else ("", "", "")
            if not sep or not model:
                BAD_DOCUMENTS.report(READ_MODEL_VERSIONS, _id, "_id is not \"model/tenant\"")
                continue
            out[(model, tenant)] = self._decode(doc)
        return out

    @translated
    async def compare_and_set(self, model: str, tenant_id: str, expected: ReadModelVersions,
                              new: ReadModelVersions) -> bool:
        _id = self._id(model, tenant_id)
        if expected.problem is not None:
            return False  # a malformed pointer is never "expected": nothing overwrites it unseen
        if expected == ReadModelVersions():
            # no document yet, or one still holding the defaults
            flt: dict[str, Any] = {"_id": _id, "active": 0, "building": None, "progress": 0}
            try:
                res = await self.coll.update_one(flt, {"$set": _fields(new)}, upsert=True)
            except DuplicateKeyError:
                return False  # the document exists and differs
            return bool(res.matched_count or res.upserted_id is not None)
        res = await self.coll.update_one({"_id": _id, **_fields(expected)}, {"$set": _fields(new)})
        return bool(res.matched_count)
