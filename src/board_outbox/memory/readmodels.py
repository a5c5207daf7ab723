from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from anyio.lowlevel import checkpoint


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

    async def get(self, model: str, tenant_id: str, key: str) -> dict[str, Any] | None:
        await checkpoint()
        return self._docs.get((model, tenant_id), {}).get(key)

    async def list(self, model: str, tenant_id: str) -> list[dict[str, Any]]:
        await checkpoint()
        return sorted(self._docs.get((model, tenant_id), {}).values(), key=lambda d: d["key"])

    async def reset(self, model: str, tenant_id: str) -> int:
        await checkpoint()
        return len(self._docs.pop((model, tenant_id), {}))
