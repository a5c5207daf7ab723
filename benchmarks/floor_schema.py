"""What both floors share (``floor.py``, the throughput floor, and ``floor_follow.py``, the
latency floor): the collection names, the batch sizes and the indexes their own queries need. In
a module of its own, so that neither floor imports the other's module for them."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, IndexModel

EVENTS, CURSORS, EFFECTS, CARDS, SUBS, MODELS = (
    "board_events", "trigger_cursors", "trigger_effects", "board_cards", "trigger_subscriptions",
    "read_models")
EVENT_BATCH = 500
CLAIM = 20


async def indexes(db: Any) -> None:
    """What the floor's own queries need, and nothing more."""
    await db[EVENTS].create_indexes([IndexModel([("tenant_id", ASCENDING), ("seq", ASCENDING)],
                                                unique=True)])
    await db[EFFECTS].create_indexes([
        IndexModel([("row_key", ASCENDING)], unique=True),
        IndexModel([("state", ASCENDING), ("not_before", ASCENDING)]),
    ])
    await db[MODELS].create_indexes([IndexModel(
        [("model", ASCENDING), ("tenant_id", ASCENDING), ("key", ASCENDING)], unique=True)])
