from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from anyio.lowlevel import checkpoint

from board_outbox.ports import PushRecent, ReadModelOp, ReadModelWrites


class MemoryReadModelStore:
    def __init__(self) -> None:
        self._docs: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}

    async def upsert_if_newer(
        self, model: str, tenant_id: str, key: str, seq: int, doc: Mapping[str, Any]
    ) -> bool:
        await checkpoint()
        docs = self._docs.setdefault((model, tenant_id), {})
        cur = docs.get(key)
        if cur is not None and cur["last_seq"] >= seq:
            return False
        docs[key] = {**doc, "key": key, "tenant_id": tenant_id, "last_seq": seq}
        return True

    async def write_many(self, model: str, tenant_id: str, ops: Sequence[ReadModelOp]) -> list[bool]:
        await checkpoint()
        docs = self._docs.setdefault((model, tenant_id), {})
        out: list[bool] = []
        for op in ops:
            cur = docs.get(op.key)
            if isinstance(op, PushRecent):
                if cur is None:
                    cur = docs[op.key] = {"key": op.key, "tenant_id": tenant_id, "last_seq": op.seq}
                entries: list[dict[str, Any]] = cur.setdefault(op.field, [])
                if any(e.get("seq") == op.seq for e in entries):
                    out.append(False)
                    continue
                entries.append({**op.entry, "seq": op.seq})
                entries.sort(key=lambda e: -int(e["seq"]))
                del entries[op.keep :]
                cur["last_seq"] = max(int(cur.get("last_seq", 0)), op.seq)
                out.append(True)
            elif cur is not None and cur["last_seq"] >= op.seq:
                out.append(False)
            else:
                docs[op.key] = {**op.doc, "key": op.key, "tenant_id": tenant_id, "last_seq": op.seq}
                out.append(True)
        return out

    async def write_groups(self, groups: Sequence[ReadModelWrites]) -> list[list[bool]]:
        return [await self.write_many(g.model, g.tenant_id, g.ops) for g in groups]

    async def get(self, model: str, tenant_id: str, key: str) -> dict[str, Any] | None:
        await checkpoint()
        return self._docs.get((model, tenant_id), {}).get(key)

    async def list(self, model: str, tenant_id: str) -> list[dict[str, Any]]:
        await checkpoint()
        return sorted(self._docs.get((model, tenant_id), {}).values(), key=lambda d: d["key"])

    async def reset(self, model: str, tenant_id: str) -> int:
        await checkpoint()
        return len(self._docs.pop((model, tenant_id), {}))
