"""Backend kits: one per storage backend, each giving the same ports plus raw access for
planting malformed documents. The contract suite is written once against a kit."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from board_outbox.adapters.memory import MemoryBackend, MemoryLauncher
from board_outbox.adapters.memory.status import MemoryStatusStore
from board_outbox.engine.handlers.registry import HandlerRegistry
from board_outbox.engine.tail.tail import Tail, TailSettings
from board_outbox.engine.work.worker import EffectWorker, WorkerSettings
from board_outbox.model.board import Card
from board_outbox.model.clock import ManualClock
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import (
    CardStore,
    Claim,
    CursorStore,
    EffectOutbox,
    EventLog,
    LabelStore,
    LimitStore,
    MembershipStore,
    PauseStore,
    ReadModelStore,
    ReadModelVersionStore,
    SeriesStore,
    SessionStore,
    StatusStore,
    Stores,
    SubscriptionStore,
)
from board_outbox.service.runtime import build_registry
from tests.support.faults import FaultInjector, FaultProxy


async def claim(
    outbox: EffectOutbox, tenant_id: str, now: float, lease_seconds: float, limit: int
) -> list[Claim]:
    """What one tick of the worker claims for one tenant (``tick_any``'s claim path, filtered
    to ``tenant_id``): its expired leases first (reclaimed, attempts +1), then its due rows."""
    claims = await outbox.reclaim_expired(now, lease_seconds, limit, tenants=[tenant_id])
    if len(claims) < limit:
        claims += await outbox.claim_any(now, lease_seconds, limit - len(claims),
                                         tenants=[tenant_id])
    return claims


# the kit's workers look for expired leases on every tick (the next tick is never earlier)
RECLAIM_EVERY_TICK = 1e-9


@dataclass
class Kit:
    """The ports of one backend, wrapped in fault proxies, with a manual clock."""

    name: str
    events: EventLog
    cursors: CursorStore
    outbox: EffectOutbox
    subs: SubscriptionStore
    cards: CardStore
    labels: LabelStore
    readmodels: ReadModelStore
    insert_raw_event: Callable[[dict[str, Any]], Awaitable[None]]
    insert_raw_row: Callable[[dict[str, Any]], Awaitable[None]]
    put_raw_card: Callable[[str, str, dict[str, Any]], Awaitable[None]]
    raw_row: Callable[[str], Awaitable[dict[str, Any] | None]]
    clock: ManualClock = field(default_factory=ManualClock)
    rm_versions: ReadModelVersionStore | None = None
    # delete a row behind the service's back (what the completeness audit must find)
    delete_raw_row: Callable[[str], Awaitable[None]] | None = None
    faults: FaultInjector = field(default_factory=FaultInjector)
    launcher: MemoryLauncher = field(default_factory=MemoryLauncher)
    # F2: the limit store, and a way to plant a slot or counter document someone else wrote
    limits: LimitStore | None = None
    put_raw_limit: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None
    # a store with indexes (Mongo): drop the limits collection behind the service's back, and
    # the names of its indexes
    drop_limits: Callable[[], Awaitable[None]] | None = None
    limit_indexes: Callable[[], Awaitable[set[str]]] | None = None
    # the backend's StatusStore (not in ``stores``: tests of the per-tenant path stay on it)
    status_store: StatusStore | None = None
    # the console's sessions, and a way to plant a session document someone else wrote
    sessions: SessionStore | None = None
    put_raw_session: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None
    # issue 33: the pause store, and a way to plant a pause document someone else wrote
    pauses: PauseStore | None = None
    put_raw_pause: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None
    # the console's series (issue 33), and a way to plant or read one of its documents
    series: SeriesStore | None = None
    put_raw_series: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None
    raw_series: Callable[[str], Awaitable[dict[str, Any] | None]] | None = None
    # the membership leases (not in ``stores``: a Service built on the kit stays alone)
    members: MembershipStore | None = None
    # P6: plant a subscription document some other tool wrote (memory: its fields unchecked)
    put_raw_sub: Callable[[dict[str, Any]], Awaitable[None]] | None = None

    def __post_init__(self) -> None:
        f = self.faults
        self.events = FaultProxy(self.events, "events", f)  # type: ignore[assignment]
        self.cursors = FaultProxy(self.cursors, "cursor", f)  # type: ignore[assignment]
        self.outbox = FaultProxy(self.outbox, "outbox", f)  # type: ignore[assignment]
        self.subs = FaultProxy(self.subs, "subs", f)  # type: ignore[assignment]
        self.cards = FaultProxy(self.cards, "cards", f)  # type: ignore[assignment]
        self.labels = FaultProxy(self.labels, "labels", f)  # type: ignore[assignment]
        self.launcher.faults = f
        if self.limits is not None:
            self.limits = FaultProxy(self.limits, "limits", f)  # type: ignore[assignment]
        if self.pauses is not None:
            self.pauses = FaultProxy(self.pauses, "pauses", f)  # type: ignore[assignment]

        if self.series is not None:
            self.series = FaultProxy(self.series, "series", f)  # type: ignore[assignment]

    @property
    def stores(self) -> Stores:
        return Stores(
            events=self.events, cursors=self.cursors, outbox=self.outbox, subs=self.subs,
            cards=self.cards, labels=self.labels, launcher=self.launcher,
            readmodels=self.readmodels, rm_versions=self.rm_versions, limits=self.limits,
            pauses=self.pauses,
        )

    # --- building the pipeline ------------------------------------------------------------

    def tail(self, projections: tuple[str, ...] = (), kinds: list[str] | None = None,
             **settings: Any) -> Tail:
        return Tail(
            events=self.events, cursors=self.cursors, outbox=self.outbox, subs=self.subs,
            cards=self.cards, clock=self.clock, settings=TailSettings(**settings),
            projections=projections, kinds=kinds,
        )

    def registry(self, projections: list[str] | None = None) -> HandlerRegistry:
        return build_registry(self.stores, projections or [])

    def worker(self, registry: HandlerRegistry | None = None, **settings: Any) -> EffectWorker:
        """The production worker (``tick_any``). Unless a test says otherwise it looks for expired
        leases on every tick (the service does every ``reclaim_every_seconds``): a test that
        moves the clock past a lease expects the next tick to reclaim the row."""
        import random

        every = settings.pop("reclaim_every_seconds", RECLAIM_EVERY_TICK)
        validated = msgspec.convert(_flat(settings), WorkerSettings)
        # below the configurable minimum (1 ms) on purpose: a test clock may not move between ticks
        return EffectWorker(
            outbox=self.outbox, registry=registry or self.registry(), clock=self.clock,
            settings=msgspec.structs.replace(validated, reclaim_every_seconds=every),
            rng=random.Random(1),
        )

    # --- board helpers -------------------------------------------------------------------

    async def emit(self, tenant: str, etype: str, card_id: str) -> int:
        seq = await self.events.allocate_seq(tenant)
        await self.events.insert(
            {"tenant_id": tenant, "seq": seq, "type": etype, "card_id": card_id,
             "at": self.clock.now()}
        )
        return seq

    async def card(self, tenant: str, card_id: str, column: str = "inbox",
                   labels: tuple[str, ...] = ()) -> Card:
        card = Card(tenant_id=tenant, card_id=card_id, title=card_id, column=column, labels=labels)
        await self.cards.put(card)
        return card

    async def sub(self, sub: Subscription) -> Subscription:
        await self.subs.put(sub)
        return sub

    async def rows(self, tenant: str | None = None) -> list[EffectRow]:
        from board_outbox.ports import RowFilter

        return await self.outbox.find(RowFilter(tenant_id=tenant, limit=100_000))


def _flat(settings: dict[str, Any]) -> dict[str, Any]:
    """``backoff={"base_seconds": 1}`` -> ``backoff_base_seconds=1`` (WorkerSettings' fields)."""
    out = dict(settings)
    for k, v in out.pop("backoff", {}).items():
        out[f"backoff_{k}"] = v
    return out


def memory_kit() -> Kit:
    b = MemoryBackend()

    async def raw_event(doc: dict[str, Any]) -> None:
        b.events.insert_now(doc)

    async def raw_row(doc: dict[str, Any]) -> None:
        b.outbox.insert_raw(doc)

    async def raw_card(tenant: str, card_id: str, doc: dict[str, Any]) -> None:
        b.board.put_raw(tenant, card_id, doc)

    async def get_raw_row(key: str) -> dict[str, Any] | None:
        return b.outbox.raw(key)

    async def delete_row(key: str) -> None:
        assert b.outbox.delete_raw(key)

    async def raw_limit(doc_id: str, doc: dict[str, Any]) -> None:
        b.limits.put_raw(doc_id, doc)

    async def raw_session(doc_id: str, doc: dict[str, Any]) -> None:
        b.sessions.put_raw(doc_id, doc)

    async def raw_pause(doc_id: str, doc: dict[str, Any]) -> None:
        b.pauses.put_raw(doc_id, doc)

    async def plant_series(doc_id: str, doc: dict[str, Any]) -> None:
        b.series.put_raw(doc_id, doc)

    async def get_series(doc_id: str) -> dict[str, Any] | None:
        return b.series.raw(doc_id)

    async def raw_sub(doc: dict[str, Any]) -> None:
        await b.subs.put(Subscription(**{k: v for k, v in doc.items() if k != "_id"}))

    return Kit(
        name="memory", events=b.events, cursors=b.cursors, outbox=b.outbox, subs=b.subs,
        cards=b.board, labels=b.board, readmodels=b.readmodels, insert_raw_event=raw_event,
        insert_raw_row=raw_row, put_raw_card=raw_card, raw_row=get_raw_row,
        rm_versions=b.rm_versions, delete_raw_row=delete_row, limits=b.limits,
        put_raw_limit=raw_limit, status_store=MemoryStatusStore(b.events, b.outbox, b.cursors),
        sessions=b.sessions, put_raw_session=raw_session, pauses=b.pauses,
        put_raw_pause=raw_pause, members=b.members, series=b.series,
        put_raw_series=plant_series, raw_series=get_series, put_raw_sub=raw_sub,
    )


KitFactory = Callable[[], AsyncIterator[Kit]]


def mongo_kit(db: Any, name: str) -> Kit:
    """The Mongo adapters over ``db``: a real AsyncDatabase, or the mongomock async face."""
    from board_outbox.adapters.mongo import (
        MongoBoard,
        MongoCursorStore,
        MongoEffectOutbox,
        MongoEventLog,
        MongoMembershipStore,
        MongoReadModelStore,
        MongoSubscriptionStore,
    )
    from board_outbox.adapters.mongo.generations import MongoGenerationStore
    from board_outbox.adapters.mongo.limits import LIMITS, MongoLimitStore
    from board_outbox.adapters.mongo.pauses import PAUSES, MongoPauseStore
    from board_outbox.adapters.mongo.series import SERIES, MongoSeriesStore
    from board_outbox.adapters.mongo.sessions import SESSIONS, MongoSessionStore
    from board_outbox.adapters.mongo.status import MongoStatusStore

    board = MongoBoard(db)
    outbox = MongoEffectOutbox(db)

    async def raw_event(doc: dict[str, Any]) -> None:
        await db["board_events"].insert_one(dict(doc))

    async def raw_row(doc: dict[str, Any]) -> None:
        await db["trigger_effects"].insert_one(dict(doc))

    async def raw_card(tenant: str, card_id: str, doc: dict[str, Any]) -> None:
        await board.put_raw(tenant, card_id, doc)

    async def delete_row(key: str) -> None:
        res = await db["trigger_effects"].delete_one({"row_key": key})
        assert res.deleted_count == 1

    async def raw_limit(doc_id: str, doc: dict[str, Any]) -> None:
        await db[LIMITS].replace_one({"_id": doc_id}, dict(doc), upsert=True)

    async def raw_session(doc_id: str, doc: dict[str, Any]) -> None:
        await db[SESSIONS].replace_one({"_id": doc_id}, dict(doc), upsert=True)

    async def raw_pause(doc_id: Any, doc: dict[str, Any]) -> None:
        await db[PAUSES].replace_one({"_id": doc_id}, dict(doc), upsert=True)

    async def plant_series(doc_id: str, doc: dict[str, Any]) -> None:
        await db[SERIES].replace_one({"_id": doc_id}, dict(doc), upsert=True)

    async def get_series(doc_id: str) -> dict[str, Any] | None:
        got: dict[str, Any] | None = await db[SERIES].find_one({"_id": doc_id})
        return got

    async def drop_limits() -> None:
        await db[LIMITS].drop()

    async def raw_sub(doc: dict[str, Any]) -> None:
        await db["trigger_subscriptions"].insert_one(dict(doc))

    async def limit_indexes() -> set[str]:
        return set(await db[LIMITS].index_information())

    return Kit(
        name=name, events=MongoEventLog(db), cursors=MongoCursorStore(db), outbox=outbox,
        subs=MongoSubscriptionStore(db), cards=board, labels=board,
        readmodels=MongoReadModelStore(db), insert_raw_event=raw_event, insert_raw_row=raw_row,
        put_raw_card=raw_card, raw_row=outbox.raw, rm_versions=MongoGenerationStore(db),
        delete_raw_row=delete_row, limits=MongoLimitStore(db), put_raw_limit=raw_limit,
        status_store=MongoStatusStore(db), sessions=MongoSessionStore(db),
        put_raw_session=raw_session, pauses=MongoPauseStore(db), put_raw_pause=raw_pause,
        members=MongoMembershipStore(db),
        drop_limits=drop_limits, limit_indexes=limit_indexes, series=MongoSeriesStore(db),
        put_raw_series=plant_series, raw_series=get_series, put_raw_sub=raw_sub,
    )
