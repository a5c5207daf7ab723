"""The in-memory ``PauseStore`` (F3): pause documents in a dict, shaped as the Mongo adapter
stores them, so a test can plant a malformed one (``put_raw``)."""

from __future__ import annotations

from typing import Any

from anyio.lowlevel import checkpoint

from board_outbox.model.domain import AuditEntry, to_doc
from board_outbox.model.pause import (
    AUDIT_KEEP,
    Pause,
    decode_pause,
    good_audit,
    parse_pause,
    pause_id,
    was_on,
)


class MemoryPauseStore:
    def __init__(self) -> None:
        self._docs: dict[str, dict[str, Any]] = {}

    def put_raw(self, doc_id: str, doc: dict[str, Any]) -> None:
        self._docs[doc_id] = dict(doc)

    def raw(self, doc_id: str) -> dict[str, Any] | None:
        return self._docs.get(doc_id)

    async def pause(self, scope: str, key: str, *, reason: str, by: str, at: float) -> bool:
        await checkpoint()
        pid = pause_id(scope, key)
        old = self._docs.get(pid)
        entry = to_doc(AuditEntry(at=at, action="pause", by=by, detail=reason))
        fields = {"scope": scope, "key": key, "active": True, "reason": reason, "by": by,
                  "at": at}
        if old is not None and isinstance(decode_pause(pid, old), Pause):
            self._docs[pid] = {**old, **fields, "audit": [*old.get("audit", []), entry][-AUDIT_KEEP:]}
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
        audit = doc.get("audit")
        doc["active"] = False
        doc["audit"] = [*(audit if isinstance(audit, list) else []), entry][-AUDIT_KEEP:]
        return True

    async def all(self) -> list[Pause]:
        await checkpoint()
        out = []
        for doc_id, doc in self._docs.items():
            pause = parse_pause(doc_id, doc)
            if pause is not None:
                out.append(pause)
        return out
