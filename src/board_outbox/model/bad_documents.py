"""Reporting a stored document the service cannot use (SPEC R1, R2, R7): capped error texts, the
once-per-problem log, and ``BAD_DOCUMENTS``, the process's list and count of the bad documents
its reads met. A leaf: the board's documents report through it as they decode
(``model/board``), and so do the checks at the boundary (``model/validation``,
``row_documents``, ``service_documents``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import msgspec

__all__ = ["BAD_DOCUMENTS", "MAX_ERROR_CHARS", "BadDocument", "BadDocuments", "OnceLog", "cap"]

MAX_ERROR_CHARS = 2000  # every logged or stored error text is capped at this


def cap(text: object, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` as a string of at most ``limit`` characters (a 16 MB error message stays short)."""
    s = str(text)
    if len(s) <= limit:
        return s
    return f"{s[: limit - 40]}... [{len(s) - limit + 40} more characters]"


class OnceLog:
    """Log each distinct problem once (not on every batch): keyed by whatever names it."""

    def __init__(self, logger: logging.Logger, limit: int = 10_000) -> None:
        self.logger = logger
        self.limit = limit
        self._seen: set[object] = set()

    def __call__(self, key: object, level: int, msg: str, *args: object,
                 extra: Mapping[str, object] | None = None) -> bool:
        """Log unless ``key`` was logged before; True if it logged."""
        if key in self._seen:
            return False
        if len(self._seen) >= self.limit:
            self._seen.clear()
        self._seen.add(key)
        self.logger.log(level, msg, *[cap(a) if isinstance(a, (str, BaseException)) else a
                                      for a in args], extra=dict(extra or {}))
        return True

    def forget(self, key: object) -> None:
        self._seen.discard(key)


class BadDocument(msgspec.Struct, frozen=True, kw_only=True):
    """One stored document the service could not use, as ``status --json`` lists it."""

    collection: str
    key: str
    problem: str


class BadDocuments:
    """The queryable trace of R1 for the service's own collections: every distinct bad document
    (collection, key, problem) is logged once, counted per collection (a metric) and kept for
    ``status --json``. One instance per process (``BAD_DOCUMENTS``): the adapters report into it
    as they parse each document, so a one-shot ``status`` run lists what its own reads met."""

    def __init__(self, logger: logging.Logger, keep: int = 1000) -> None:
        self._once = OnceLog(logger)
        self.keep = keep
        self.counts: dict[str, int] = {}  # collection -> distinct bad documents seen
        self._current: dict[tuple[str, str], BadDocument] = {}

    def report(self, collection: str, key: object, problem: str, *,
               level: int = logging.ERROR) -> bool:
        """Record one bad document; True the first time this (collection, key, problem) is seen."""
        doc = BadDocument(collection=collection, key=cap(repr(key) if not isinstance(key, str)
                                                         else key, 200),
                          problem=cap(problem, 400))
        if not self._once((collection, doc.key, doc.problem), level,
                          "ignoring malformed %s document %s: %s", collection, doc.key,
                          doc.problem, extra={"collection": collection}):
            return False
        self.counts[collection] = self.counts.get(collection, 0) + 1
        if len(self._current) >= self.keep:
            self._current.pop(next(iter(self._current)))
        self._current[(collection, doc.key)] = doc
        return True

    def resolved(self, collection: str, key: str) -> None:
        """The document is good again (or gone): no longer listed; a relapse is logged again."""
        doc = self._current.pop((collection, key), None)
        if doc is not None:
            self._once.forget((collection, doc.key, doc.problem))

    def current(self) -> list[BadDocument]:
        return sorted(self._current.values(), key=lambda d: (d.collection, d.key))


BAD_DOCUMENTS = BadDocuments(logging.getLogger("board_outbox.documents"))
