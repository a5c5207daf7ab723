"""The store-wide epoch: when this deployment began following the board. ``[tail] seed =
"latest"`` leaves unlaunched only the events written at or before it: a tenant born later --
while the service runs, or while every replica is down -- is read from its first event.

It is one document of ``trigger_cursors`` under ``EPOCH_KEY``, written once ($setOnInsert) by
the first ``ensure-schema`` or replica start and never changed; every replica reads the same
one. The key holds a "~", which no tenant id can (``ids.check_id``), and the document has no
``seq``: no reader of cursors takes it for a tenant's."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.times import stamp, time_problem

__all__ = ["EPOCH_KEY", "epoch_at", "written_before"]

EPOCH_KEY = "~epoch"
_CURSORS = "trigger_cursors"  # the adapters' name for it


def epoch_at(doc: Mapping[str, Any] | None, now: float) -> float:
    """The epoch a stored epoch document holds (its ``at``, epoch seconds). One that does not
    parse is reported once (a bad document of ``trigger_cursors``) and ``now`` -- this replica's
    start -- stands in: history before it stays unlaunched, tenants born after it are read in
    full. The document is left as it is (an operator's to fix or delete)."""
    at = None if doc is None else stamp(doc.get("at"))
    if at is not None:
        BAD_DOCUMENTS.resolved(_CURSORS, EPOCH_KEY)  # fixed: no longer listed
        return at
    problem = "missing" if doc is None else time_problem("at", doc.get("at"))
    BAD_DOCUMENTS.report(_CURSORS, EPOCH_KEY, f"epoch {problem}: this replica's start is used "
                         "instead", level=logging.WARNING)
    return now


def written_before(event: Mapping[str, Any], epoch: float) -> bool:
    """Was this event written at or before ``epoch`` (its ``at``)? An event with no time, or one
    out of range, counts as written before: it is never launched by a ``latest`` seed."""
    at = stamp(event.get("at"))
    return at is None or at <= epoch
