"""``RawDocuments``: the in-memory twins' documents by id, kept as the Mongo adapter stores them,
so that a test can plant a malformed one (``put_raw``) and read one back as stored (``raw``):
what the store must survive is what a twin can hold."""

from __future__ import annotations

from typing import Any

__all__ = ["RawDocuments"]


class RawDocuments:
    def __init__(self) -> None:
        self._docs: dict[str, dict[str, Any]] = {}

    def put_raw(self, doc_id: str, doc: dict[str, Any]) -> None:
        self._docs[doc_id] = dict(doc)

    def raw(self, doc_id: str) -> dict[str, Any] | None:
        return self._docs.get(doc_id)
