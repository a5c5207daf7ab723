"""``board_outbox_pauses`` on MongoDB (F3): the operators' pauses, one small document per
(scope, key), ``_id`` = ``"<scope>:<key>"`` (``model/pause``). Every replica reads the whole
collection once per heartbeat (it holds one document per key ever paused: a handful); each
write is one atomic ``findAndModify`` on one document, its audit entry ``$push``-ed with it.

A document whose ``audit`` is not an array refuses the ``$push``: ``pause`` then writes the
document whole again (the operator's pause always lands), ``resume`` lifts it the same way."""

from __future__ import annotations

from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError, OperationFailure

from board_outbox.adapters.mongo.errors import is_transient, translated
from board_outbox.model.codec import to_doc
from board_outbox.model.pause import (
    AUDIT_KEEP,
    PAUSES_COLLECTION,
    Pause,
    decode_pause,
    good_audit,
    parse_pauses,
    pause_id,
    was_on,
)
from board_outbox.model.rows import AuditEntry

PAUSES = PAUSES_COLLECTION


def _push(entry: dict[str, Any]) -> dict[str, Any]:
    return {"audit": {"$each": [entry], "$slice": -AUDIT_KEEP}}


class MongoPauseStore:
    def __init__(self, db: Any) -> None:
        self.coll = db[PAUSES]

    @translated
    async def pause(self, scope: str, key: str, *, reason: str, by: str, at: float) -> bool:
        pid = pause_id(scope, key)
        fields = {"scope": scope, "key": key, "active": True, "reason": reason, "by": by, "at": at}
        entry = to_doc(AuditEntry(at=at, action="pause", by=by, detail=reason))
        stored = await self.coll.find_one({"_id": pid})
        if stored is not None and isinstance(decode_pause(pid, stored), str):
            # a document that does not parse is written whole again (its good audit kept)
            before = await self.coll.find_one_and_replace(
                {"_id": pid}, {**fields, "audit": [*good_audit(stored), entry]}, upsert=True,
                return_document=ReturnDocument.BEFORE)
            return not was_on(pid, before)
        for _ in range(2):  # two first pauses of one key may race on the insert
            try:
                before = await self.coll.find_one_and_update(
                    {"_id": pid}, {"$set": fields, "$push": _push(entry)}, upsert=True,
                    return_document=ReturnDocument.BEFORE)
            except DuplicateKeyError:
                continue
            except OperationFailure as exc:
                if is_transient(exc):
                    raise
                # made bad since the read (the audit no longer an array): written whole again
                before = await self.coll.find_one_and_replace(
                    {"_id": pid}, {**fields, "audit": [entry]}, upsert=True,
                    return_document=ReturnDocument.BEFORE)
            return not was_on(pid, before)
        return False  # the racing pause inserted it: it is paused, and not by this call

    @translated
    async def resume(self, scope: str, key: str, *, by: str, at: float) -> bool:
        pid = pause_id(scope, key)
        if not was_on(pid, await self.coll.find_one({"_id": pid})):
            return False  # not paused (a bad document pauses nothing either)
        on = {"_id": pid, "active": True}
        entry = to_doc(AuditEntry(at=at, action="resume", by=by))
        try:
            res = await self.coll.update_one(on, {"$set": {"active": False}, "$push": _push(entry)})
        except OperationFailure as exc:
            if is_transient(exc):
                raise
            res = await self.coll.update_one(on, {"$set": {"active": False, "audit": [entry]}})
        return bool(res.modified_count == 1)

    @translated
    async def all(self) -> list[Pause]:
        return parse_pauses((doc.get("_id"), doc) for doc in await self.coll.find({}).to_list(None))
