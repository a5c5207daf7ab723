"""What ``board-outbox doctor`` learns about a deployment (O7) and what it concludes: plain
values, filled by a store's probe (``adapters/mongo/diagnostics``) and judged by the doctor
(``surface/doctor``). A leaf: no I/O."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = ["Check", "IndexFacts", "OplogFacts", "Privilege", "ServerFacts", "Status"]

Status = Literal["ok", "warn", "fail", "skip"]


class Check(msgspec.Struct, kw_only=True):
    """One check's verdict: what it found and, unless it passed, what to do."""

    name: str
    status: Status
    found: str
    todo: str = ""


class ServerFacts(msgspec.Struct, kw_only=True):
    version: str
    set_name: str | None  # None: not a replica set member
    writable_primary: bool
    primary: str | None
    sent_at: float  # the local clock when ``hello`` left ...
    received_at: float  # ... and when its answer came back
    server_time: float | None  # the server's clock in that answer (``localTime``)
    max_wire_version: int = 0


class Privilege(msgspec.Struct, kw_only=True):
    db: str | None = None
    collection: str | None = None
    any_resource: bool = False
    cluster: bool = False
    actions: list[str] = msgspec.field(default_factory=list)

    def grants(self, action: str, db: str, collection: str) -> bool:
        """Whether this privilege allows ``action`` on ``db.collection`` (MongoDB's resource
        rules: "" is any database or any collection; ``anyResource`` is everything)."""
        if action not in self.actions and "anyAction" not in self.actions:
            return False
        if self.any_resource:
            return True
        if self.cluster or self.db is None or self.collection is None:
            return False
        return self.db in ("", db) and self.collection in ("", collection)


class IndexFacts(msgspec.Struct, kw_only=True):
    name: str
    key: list[tuple[str, Any]]
    unique: bool = False
    partial: dict[str, Any] | None = None
    expire_after_seconds: Any = None


class OplogFacts(msgspec.Struct, kw_only=True):
    first: float | None  # the oldest entry's wall time (None: empty)
    last: float | None  # the newest's
    full: bool | None  # at its size limit, so trimming (None: the server does not say)
    size_bytes: float | None = None
    max_bytes: float | None = None
    # when the service last saved its change stream's resume token (None: never); its headroom
    # (A2) is this minus ``first``
    token_saved_at: float | None = None
