"""``ensure_schema``: the collections' indexes (M12). Idempotent: run it at every start."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.errors import OperationFailure

from board_outbox.adapters.mongo.errors import translated
from board_outbox.adapters.mongo.events import EVENTS
from board_outbox.adapters.mongo.limits import LIMIT_INDEXES, LIMITS
from board_outbox.adapters.mongo.membership import MEMBERS
from board_outbox.adapters.mongo.outbox.statements import EFFECTS
from board_outbox.adapters.mongo.readmodels import READ_MODELS
from board_outbox.adapters.mongo.series import SERIES
from board_outbox.adapters.mongo.sessions import SESSIONS
from board_outbox.adapters.mongo.subscriptions import SUBSCRIPTIONS
from board_outbox.model.errors import StoreError
from board_outbox.model.retention import Retention
from board_outbox.model.rows import CANCELLED, CLAIMED, COALESCED, DONE, DONE_TTL_SECONDS, FAILED, PENDING

__all__ = ["DONE_TTL_SECONDS", "FAILED_AT", "INDEXES", "OBSOLETE", "TTL_NAMES", "TTL_STATES",
           "ensure_schema", "expected_indexes", "ttl_indexes"]

INDEXES: dict[str, list[IndexModel]] = {
    EFFECTS: [
        # the row key: racing replicas collapse on it
        IndexModel([("row_key", ASCENDING)], name="row_key_unique", unique=True),
        # the completeness audit and the replays read a tenant's rows by seq range (A1, A4)
        IndexModel([("tenant_id", ASCENDING), ("seq", ASCENDING)], name="tenant_seq"),
        # Partial indexes, one per state a hot query reads: each holds only the rows in that
        # state, so a query's bounds cover those rows, never the history (which grows), and a
        # row's state change touches only the indexes of the states it leaves and enters.
        # the worker's claim across tenants (S2): pending rows by due time
        IndexModel([("not_before", ASCENDING)], name="pending_not_before",
                   partialFilterExpression={"state": PENDING}),
        # the pick's second query under a backlog: the other tenants' oldest due rows
        # (``tenant_id: {$nin: seen}``: its bounds skip the backlogged tenants' keys)
        IndexModel([("tenant_id", ASCENDING), ("not_before", ASCENDING)],
                   name="pending_tenant_not_before", partialFilterExpression={"state": PENDING}),
        # the pick's third query under a backlog: the due rows of a priority above 0, highest
        # first, then oldest first (F1); a row at 0 has no ``priority`` field (slim
        # rows), so while no subscription sets a priority this index is empty and costs no write
        IndexModel([("priority", DESCENDING), ("not_before", ASCENDING)],
                   name="pending_priority_not_before",
                   partialFilterExpression={"state": PENDING, "priority": {"$gt": 0}}),
        # the expired-lease sweep
        IndexModel([("lease_until", ASCENDING)], name="claimed_lease_until",
                   partialFilterExpression={"state": CLAIMED}),
        # the dead-letters, newest first (B1), and a bulk replay's walk over them, oldest first
        # (``failed_page``): keyed by (updated_at, row_key), a total order whose position a
        # page resumes from with index bounds, however many rows were parked at one instant
        IndexModel([("updated_at", ASCENDING), ("row_key", ASCENDING)],
                   name="failed_updated_at_row_key", partialFilterExpression={"state": FAILED}),
        # a bulk cancel's walk over the pending rows (A8), in the same order and for the same
        # reason; it holds only the rows born pending (not those born claimed by the tail's
        # hand-off) while they wait: one key written at insert and one removed at the claim
        IndexModel([("updated_at", ASCENDING), ("row_key", ASCENDING)],
                   name="pending_updated_at_row_key", partialFilterExpression={"state": PENDING}),
        # the settled rows' TTL indexes follow the configuration: ``ttl_indexes`` below (the
        # defaults are appended to this list after it)
        # a search by card (A8, ``rows find --card``): a tenant's card's rows by seq; one key
        # per row, written at its insert (a row's event never changes)
        IndexModel([("tenant_id", ASCENDING), ("event.card_id", ASCENDING), ("seq", ASCENDING)],
                   name="tenant_card_seq"),
        # the coalescing check: a launch row's newer rows of its (subscription, card);
        # only the rows of coalescing subscriptions carry ``burst_at``, so no other row pays
        IndexModel([("tenant_id", ASCENDING), ("sub_id", ASCENDING),
                    ("event.card_id", ASCENDING), ("seq", ASCENDING)],
                   name="burst_sub_card_seq",
                   partialFilterExpression={"burst_at": {"$exists": True}}),
    ],
    EVENTS: [
        IndexModel([("tenant_id", ASCENDING), ("seq", ASCENDING)], name="tenant_seq_unique",
                   unique=True),
    ],
    MEMBERS: [IndexModel([("expires_at", ASCENDING)], name="expires_at")],
    # F2: a key's slots are renewed and released by key and holder; slots and counters expire
    LIMITS: LIMIT_INDEXES,
    SUBSCRIPTIONS: [IndexModel([("tenant_id", ASCENDING)], name="tenant")],
    # the console's sessions end on their own (a logout deletes them sooner)
    SESSIONS: [IndexModel([("expire_at", ASCENDING)], name="expire_ttl", expireAfterSeconds=0)],
    # the console's charts: the window is read by minute; each document carries its
    # own end (a writer's series.keep_hours past its minute)
    SERIES: [IndexModel([("minute", ASCENDING)], name="minute"),
             IndexModel([("expire_at", ASCENDING)], name="expire_ttl", expireAfterSeconds=0)],
    READ_MODELS: [IndexModel([("model", ASCENDING), ("tenant_id", ASCENDING), ("key", ASCENDING)],
                             name="model_tenant_key")],
}


# Indexes earlier versions created, dropped by ``ensure_schema``: full indexes over ``state``
# that every row's every state change had to update, replaced by the partial indexes above (the
# queries that used them are served by those; an older replica still running finds them too).
# ``failed_updated_at`` (updated_at alone) is the prefix of ``failed_updated_at_row_key``.
OBSOLETE: dict[str, tuple[str, ...]] = {
    EFFECTS: ("tenant_state_not_before", "state_updated", "state_not_before", "state_lease_until",
              "failed_updated_at"),
}


# --- retention (O8): the settled rows' TTL indexes, one per terminal state --------------------

FAILED_AT = "failed_at"  # a dead-letter's parked time, a BSON date (``transitions.park``)
# terminal state -> (its TTL index, the date field it counts from)
TTL_STATES: dict[str, tuple[str, str]] = {
    # done rows expire ``retention.done_seconds`` after ``done_at`` (M11b)
    DONE: ("done_ttl", "done_at"),
    # coalesced rows on the same clock; this index also serves their count
    # (``IN_STATE``)
    COALESCED: ("coalesced_ttl", "done_at"),
    # rows an operator cancelled (A8), likewise; this index also serves their count
    CANCELLED: ("cancelled_ttl", "done_at"),
    # dead-letters only when ``retention.failed_seconds`` is set (else the index is dropped)
    FAILED: ("failed_ttl", FAILED_AT),
}


def ttl_indexes(retention: Retention) -> dict[str, IndexModel]:
    """The TTL indexes ``retention`` asks for, by name (a state kept forever has none)."""
    out: dict[str, IndexModel] = {}
    for state, seconds in retention.by_state().items():
        name, field = TTL_STATES[state]
        if seconds:
            out[name] = IndexModel([(field, ASCENDING)], name=name, expireAfterSeconds=seconds,
                                   partialFilterExpression={"state": state})
    return out


TTL_NAMES = frozenset(name for name, _field in TTL_STATES.values())
# INDEXES holds every index of the default retention too
INDEXES[EFFECTS] += ttl_indexes(Retention()).values()


def expected_indexes(retention: Retention) -> dict[str, list[IndexModel]]:
    """Every index ``ensure_schema`` makes under ``retention``, by collection."""
    out = {coll: [m for m in models if m.document["name"] not in TTL_NAMES]
           for coll, models in INDEXES.items()}
    out[EFFECTS] += ttl_indexes(retention).values()
    return out


async def _follow_retention(db: Any, retention: Retention) -> list[str]:
    """Make the TTL indexes match ``retention``: create the missing ones, ``collMod`` the
    expiry of those that differ (a change of the setting takes effect at the next
    ``ensure-schema`` or start, with no rebuild of the index), drop the failed rows' index when
    dead-letters are kept forever. Returns what it did, one entry per index."""
    coll = db[EFFECTS]
    present = await coll.index_information()
    wanted = ttl_indexes(retention)
    done: list[str] = []
    for name, model in wanted.items():
        seconds = model.document["expireAfterSeconds"]
        have = present.get(name)
        if have is None:
            try:
                done += await coll.create_indexes([model])
                continue
            except OperationFailure as exc:  # a replica with another retention made it first
                if exc.code not in (85, 86):
                    raise
                have = (await coll.index_information()).get(name, {})
        if have.get("expireAfterSeconds") != seconds:
            await db.command("collMod", EFFECTS,
                             index={"name": name, "expireAfterSeconds": seconds})
            done.append(f"{name} (expireAfterSeconds {have.get('expireAfterSeconds')} -> "
                        f"{seconds})")
    for name in TTL_NAMES:
        if name not in wanted and name in present:
            try:
                await coll.drop_index(name)
            except OperationFailure as exc:
                if exc.code != 27:  # IndexNotFound: another replica dropped it first
                    raise
            done.append(f"{name} (dropped: kept forever)")
    return done


@translated
async def ensure_schema(db: Any, retention: Retention | None = None) -> list[str]:
    """Create every index, make the TTL indexes follow ``retention`` (the defaults when None)
    and drop the obsolete indexes; return the indexes created or changed (each one's name, a
    changed TTL's with what changed). Safe to run again and from several replicas."""
    created: list[str] = []
    for coll, all_models in INDEXES.items():
        models = [m for m in all_models if m.document["name"] not in TTL_NAMES]  # below
        before = set(await db[coll].index_information())
        try:
            created += [n for n in await db[coll].create_indexes(models) if n not in before]
        except OperationFailure as exc:
            if exc.code in (85, 86):  # IndexOptionsConflict / IndexKeySpecsConflict
                raise StoreError(
                    f"ensure_schema: an index on {coll} exists with other options ({exc}); "
                    "drop it and run ensure-schema again"
                ) from exc
            raise
    for coll, names in OBSOLETE.items():
        present = set(await db[coll].index_information())
        for name in names:
            if name in present:
                try:
                    await db[coll].drop_index(name)
                except OperationFailure as exc:
                    if exc.code != 27:  # IndexNotFound: another replica dropped it first
                        raise
    created += await _follow_retention(db, retention or Retention())
    return created
