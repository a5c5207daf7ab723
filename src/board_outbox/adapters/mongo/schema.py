"""``ensure_schema``: the collections' indexes (M12). Idempotent: run it at every start."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, IndexModel
from pymongo.errors import OperationFailure

from board_outbox.adapters.mongo.errors import translated
from board_outbox.adapters.mongo.events import EVENTS
from board_outbox.adapters.mongo.limits import LIMITS
from board_outbox.adapters.mongo.membership import MEMBERS
from board_outbox.adapters.mongo.outbox import EFFECTS
from board_outbox.adapters.mongo.readmodels import READ_MODELS
from board_outbox.adapters.mongo.subscriptions import SUBSCRIPTIONS
from board_outbox.model.domain import DONE_TTL_SECONDS
from board_outbox.model.errors import StoreError

__all__ = ["DONE_TTL_SECONDS", "INDEXES", "ensure_schema"]

INDEXES: dict[str, list[IndexModel]] = {
    EFFECTS: [
        # the claim query: a tenant's due rows by state and not_before
        IndexModel([("tenant_id", ASCENDING), ("state", ASCENDING), ("not_before", ASCENDING)],
                   name="tenant_state_not_before"),
        # the row key: racing replicas collapse on it
        IndexModel([("row_key", ASCENDING)], name="row_key_unique", unique=True),
        # done rows expire after 7 days; failed rows (the dead-letter) never do (M11b)
        IndexModel([("done_at", ASCENDING)], name="done_ttl",
                   expireAfterSeconds=DONE_TTL_SECONDS,
                   partialFilterExpression={"state": "done"}),
        IndexModel([("state", ASCENDING), ("updated_at", ASCENDING)], name="state_updated"),
        # the worker's one claim query across tenants, and its expired-lease sweep (S2)
        IndexModel([("state", ASCENDING), ("not_before", ASCENDING)], name="state_not_before"),
        IndexModel([("state", ASCENDING), ("lease_until", ASCENDING)], name="state_lease_until"),
        # the completeness audit and the replays read a tenant's rows by seq range (A1, A4)
        IndexModel([("tenant_id", ASCENDING), ("seq", ASCENDING)], name="tenant_seq"),
    ],
    EVENTS: [
        IndexModel([("tenant_id", ASCENDING), ("seq", ASCENDING)], name="tenant_seq_unique",
                   unique=True),
    ],
    MEMBERS: [IndexModel([("expires_at", ASCENDING)], name="expires_at")],
    # F2: a key's slots are released by key and holder; slots and counters expire (TTL)
    LIMITS: [IndexModel([("key", ASCENDING), ("holder", ASCENDING)], name="key_holder"),
             IndexModel([("expire_at", ASCENDING)], name="expire_ttl", expireAfterSeconds=0)],
    SUBSCRIPTIONS: [IndexModel([("tenant_id", ASCENDING)], name="tenant")],
    READ_MODELS: [IndexModel([("model", ASCENDING), ("tenant_id", ASCENDING), ("key", ASCENDING)],
                             name="model_tenant_key")],
}


@translated
async def ensure_schema(db: Any) -> list[str]:
    """Create every index; return their names. Safe to run again and from several replicas."""
    created: list[str] = []
    for coll, models in INDEXES.items():
        try:
            created += await db[coll].create_indexes(models)
        except OperationFailure as exc:
            if exc.code in (85, 86):  # IndexOptionsConflict / IndexKeySpecsConflict
                raise StoreError(
                    f"ensure_schema: an index on {coll} exists with other options ({exc}); "
                    "drop it and run ensure-schema again"
                ) from exc
            raise
    return created
