"""In-memory read-model generation pointers (B3 shadow rebuilds). A planted raw document (a
dict) is parsed as the Mongo adapter parses its documents."""

from __future__ import annotations

from typing import Any

from anyio.lowlevel import checkpoint

from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.service_documents import parse_generation
from board_outbox.ports import ReadModelVersions

READ_MODEL_VERSIONS = "read_model_versions"


def _parse(key: tuple[str, str], value: Any) -> ReadModelVersions:
    v = value if isinstance(value, ReadModelVersions) else parse_generation(
        value if isinstance(value, dict) else {"active": value})
    if v.problem is not None:
        BAD_DOCUMENTS.report(READ_MODEL_VERSIONS, "/".join(key), v.problem)
    return v


class MemoryGenerationStore:
    def __init__(self) -> None:
        self._docs: dict[tuple[str, str], ReadModelVersions] = {}

    async def get(self, model: str, tenant_id: str) -> ReadModelVersions:
        await checkpoint()
        key = (model, tenant_id)
        return _parse(key, self._docs[key]) if key in self._docs else ReadModelVersions()

    async def all(self) -> dict[tuple[str, str], ReadModelVersions]:
        await checkpoint()
        return {k: _parse(k, v) for k, v in self._docs.items()}

    async def compare_and_set(self, model: str, tenant_id: str, expected: ReadModelVersions,
                              new: ReadModelVersions) -> bool:
        await checkpoint()
        if expected.problem is not None:
            return False  # a malformed pointer is never "expected": nothing overwrites it unseen
        if self._docs.get((model, tenant_id), ReadModelVersions()) != expected:
            return False
        self._docs[(model, tenant_id)] = new
        return True
