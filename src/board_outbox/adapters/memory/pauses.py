"""The in-memory ``PauseStore`` (F3): pause documents in a dict, shaped as the Mongo adapter
stores them, so a test can plant a malformed one (``put_raw``)."""

from __future__ import annotations

from anyio.lowlevel import checkpoint

from board_outbox.adapters.memory.documents import RawDocuments
from board_outbox.model.codec import to_doc
from board_outbox.model.pause import (
    Pause,
    append_audit,
    decode_pause,
    good_audit,
    parse_pauses,
    pause_id,
    was_on,
)
from board_outbox.model.rows import AuditEntry


class MemoryPauseStore(RawDocuments):
    async def pause(self, scope: str, key: str, *, reason: str, by: str, at: float) -> bool:
        await checkpoint()
        pid = pause_id(scope, key)
        old = self._docs.get(pid)
        entry = to_doc(AuditEntry(at=at, action="pause", by=by, detail=reason))
        fields = {"scope": scope, "key": key, "active": True, "reason": reason, "by": by,
                  "at": at}
        if old is not None and isinstance(decode_pause(pid, old), Pause):
            self._docs[pid] = {**old, **fields, "audit": append_audit(old.get("audit"), entry)}
        else:  # new, or a document that does not parse: written whole again
            self._docs[pid] = {**fields, "audit": [*good_audit(old), entry]}
        return not was_on(pid, old)

    async def resume(self, scope: str, key: str, *, by: str, at: float) -> bool:
        await checkpoint()
        pid = pause_id(scope, key)
        doc = self._docs.get(pid)
        if not was_on(pid, doc):  # not paused (a bad document pauses nothing either)
            return False
        assert doc is not None
        entry = to_doc(AuditEntry(at=at, action="resume", by=by))
        doc["active"] = False
        doc["audit"] = append_audit(doc.get("audit"), entry)
        return True

    async def all(self) -> list[Pause]:
        await checkpoint()
        return parse_pauses(self._docs.items())
