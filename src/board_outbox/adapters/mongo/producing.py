"""Appending one board event for a producer (``board_outbox.producer``): allocate the tenant's
next seq in ``board_event_counters``, then insert the event with it into ``board_events``.

Two round trips, never one transaction (M7): a seq allocated and never inserted -- the producer
died in between, or the insert failed -- is a hole. The tail waits ``young_gap_seconds`` for it
(an insert still on its way), then steps over it as a dead allocation with one warning. So the
document is checked (BSON-encodable, under 16 MB) *before* a seq is spent on it.

Async (pymongo ``AsyncDatabase``) and sync (pymongo ``Database``) forms; pymongo's errors leave
as ``StoreUnavailable`` (transient: worth another ``emit``) or ``StoreError``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import bson
from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError, PyMongoError

from board_outbox.adapters.mongo.errors import classify
from board_outbox.adapters.mongo.events import COUNTERS, EVENTS
from board_outbox.model.errors import StoreError

MAX_EVENT_BYTES = 16 * 1024 * 1024 - 16 * 1024  # the server's limit, less room for its overhead

# the databases a producer passes (pymongo's types, named here so that only this adapter
# imports the driver)
AsyncEventsDatabase = AsyncDatabase[Any]
EventsDatabase = Database[Any]


def check_document(doc: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` if the event could not be inserted (not BSON, or too big): before
    a seq is allocated for it, so a bad document never leaves a hole."""
    try:
        size = len(bson.encode(dict(doc, seq=0)))
    except (bson.errors.InvalidDocument, TypeError, OverflowError) as exc:
        raise ValueError(f"the event is not a BSON document: {exc}") from None
    if size > MAX_EVENT_BYTES:
        raise ValueError(f"the event is {size} bytes, over the {MAX_EVENT_BYTES}-byte limit")


def _taken(tenant_id: str, seq: int) -> StoreError:
    return StoreError(f"seq {seq} of tenant {tenant_id!r} is already in {EVENTS}: "
                      f"{COUNTERS} is behind the events (restored or edited by hand?); "
                      "the seq is spent, nothing was written")


async def append(db: AsyncEventsDatabase, doc: Mapping[str, Any]) -> int:
    """Allocate the tenant's next seq and insert ``doc`` with it; the seq."""
    tenant_id = doc["tenant_id"]
    with _allocating():
        counter = await db[COUNTERS].find_one_and_update({"_id": tenant_id}, _NEXT_SEQ, **_UPSERT)
    seq = _seq_of(counter)
    with _inserting(tenant_id, seq):
        await db[EVENTS].insert_one({**doc, "seq": seq})
    return seq


def append_sync(db: EventsDatabase, doc: Mapping[str, Any]) -> int:
    """``append`` on a synchronous pymongo ``Database``."""
    tenant_id = doc["tenant_id"]
    with _allocating():
        counter = db[COUNTERS].find_one_and_update({"_id": tenant_id}, _NEXT_SEQ, **_UPSERT)
    seq = _seq_of(counter)
    with _inserting(tenant_id, seq):
        db[EVENTS].insert_one({**doc, "seq": seq})
    return seq


# The two forms share everything but the driver's call: the counter's update (the tenant's
# next seq: ``$inc``, upserted, the document after it returned) and what each write's failure
# means.
_NEXT_SEQ: dict[str, Any] = {"$inc": {"seq": 1}}
_UPSERT: dict[str, Any] = {"upsert": True, "return_document": ReturnDocument.AFTER}


def _seq_of(counter: Any) -> int:
    return int(counter["seq"])  # an upsert returning the document after it: never None


@contextmanager
def _allocating() -> Iterator[None]:
    try:
        yield
    except PyMongoError as exc:
        raise classify(exc, "emit: allocating a seq") from exc


@contextmanager
def _inserting(tenant_id: str, seq: int) -> Iterator[None]:
    try:
        yield
    except DuplicateKeyError:
        raise _taken(tenant_id, seq) from None
    except PyMongoError as exc:
        raise classify(exc, _hole(tenant_id, seq)) from exc


def _hole(tenant_id: str, seq: int) -> str:
    return (f"emit: inserting seq {seq} of tenant {tenant_id!r} (unless it did land, the seq is "
            "a hole the service steps over after young_gap_seconds)")
