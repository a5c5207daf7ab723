"""The in-memory ``LimitStore`` (F2): slot and counter documents in a dict, shaped as the Mongo
adapter stores them, so a test can plant a malformed one (``put_raw``)."""

from __future__ import annotations

from anyio.lowlevel import checkpoint

from board_outbox.adapters.memory.documents import RawDocuments
from board_outbox.model.limits import rate_slot, slot_id
from board_outbox.model.records import LimitHolder
from board_outbox.model.service_documents import counter_problem, report_slot, slot_is_free
from board_outbox.model.validation import finite


class MemoryLimitStore(RawDocuments):
    async def acquire(self, key: str, limit: int, holder: str, until: float, now: float) -> bool:
        await checkpoint()
        for k in range(limit):
            sid = slot_id(key, k)
            doc = self._docs.get(sid)
            if doc is not None:
                report_slot(doc, sid, now)
            if doc is None or slot_is_free(doc, holder, now):
                self._docs[sid] = {"key": key, "holder": holder, "until": until}
                return True
        return False

    async def renew(self, key: str, holder: str, until: float) -> bool:
        await checkpoint()
        held = [d for d in self._docs.values() if d.get("key") == key and d.get("holder") == holder]
        for doc in held:
            doc["until"] = until
        return bool(held)

    async def release(self, key: str, holder: str) -> None:
        await checkpoint()
        for doc in self._docs.values():
            if doc.get("key") == key and doc.get("holder") == holder:
                doc["holder"] = None

    async def take(self, key: str, per_second: float, now: float) -> bool:
        await checkpoint()
        cid, allowed, _end = rate_slot(key, per_second, now)
        doc = self._docs.setdefault(cid, {"n": 0})
        n = doc.get("n")
        if counter_problem(doc) is not None or not isinstance(n, int) or n >= allowed:
            return False  # full (or a counter that is not a count: its window stays shut)
        doc["n"] = n + 1
        return True

    async def holders(self, key: str, now: float) -> list[LimitHolder]:
        await checkpoint()
        out = []
        for sid, doc in self._docs.items():
            if doc.get("key") != key or doc.get("holder") is None or report_slot(doc, sid, now):
                continue
            holder, until = doc.get("holder"), finite(doc.get("until"))
            if isinstance(holder, str) and until is not None and until > now:
                out.append(LimitHolder(holder=holder, until=until))
        return sorted(out, key=lambda h: h.holder)

    async def counted(self, key: str, per_second: float, now: float) -> int | None:
        await checkpoint()
        doc = self._docs.get(rate_slot(key, per_second, now)[0])
        if doc is None:
            return 0
        n = doc.get("n")
        return n if counter_problem(doc) is None and isinstance(n, int) else None

    async def upkeep(self) -> list[str]:
        await checkpoint()
        return []  # a dict has no indexes to lose
