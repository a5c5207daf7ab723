"""The bad-data corpus (issue 14, SPEC R1-R3): one bad document costs at most its own row, event or
tenant -- never the process, never another tenant -- and leaves exactly one clear trace.

Each case plants one bad document into a pipeline (tail + worker, the passes the service's loops
run) while a healthy tenant receives an event every pass. Checked for every case, on the memory
twins and on the Mongo adapters (mongomock):

- the passes never raise (the process would still be running);
- the healthy tenant's every event is launched;
- the bad input leaves exactly one WARNING/ERROR line (``log``), or one dead-letter that
  ``dead-letters list`` shows and ``purge`` deletes plus its one line (``dead``), or nothing
  at all because it now simply works (``flows``);
- where the case says so, the bad tenant's later, good events still flow (it cost one event).

The config and CLI cases check one line on stderr, exit 2 and no traceback.

The note table (input -> behaviour before -> behaviour after) is at the bottom of this file.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from bson import Decimal128
from bson.binary import Binary

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.engine.flow.pause import PauseGate
from board_outbox.engine.tail.tail import Tail
from board_outbox.engine.work.worker import EffectWorker
from board_outbox.model.board import Card, EventSnapshot
from board_outbox.model.errors import UsageError
from board_outbox.model.limits import bot_key, rate_slot, slot_id
from board_outbox.model.pause import HELD_OFFSET
from board_outbox.model.rows import TraceContext, new_launch_row
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import RowFilter
from board_outbox.service.runtime import build_registry
from board_outbox.surface.admin import dead_letter_filter
from board_outbox.surface.cli import main
from tests.support.kits import Kit, mongo_kit

PASSES = 4  # each pass: one healthy event, the clock +20 s, drain every tenant, one worker tick


@dataclass
class Rig:
    name: str
    kit: Kit
    backend: MemoryBackend | None = None  # memory: raw access
    db: Any = None  # mongo: raw access
    tail: Tail | None = None
    worker: EffectWorker | None = None
    pauses: PauseGate | None = None  # read every pass, as the service reads it every heartbeat
    healthy: str = ""

    @property
    def prefix(self) -> str:
        return {"memory": "m", "mongomock": "x"}.get(self.name, "w")

    # --- planting ---------------------------------------------------------------------------

    async def tenant(self, t: str) -> None:
        """A tenant with a subscription on card.created and one good card."""
        await self.kit.subs.put(Subscription(sub_id=f"{t}-sub", tenant_id=t, bot="bot",
                                             rule=MatchRule(event_types=("card.created",))))
        await self.kit.cards.put(Card(tenant_id=t, card_id="ok", title="ok", column="inbox"))

    async def emit(self, t: str, card_id: str = "ok") -> int:
        return await self.kit.emit(t, "card.created", card_id)

    async def event(self, doc: dict[str, Any], *, allocate: bool = True) -> None:
        """A raw event; ``allocate``: its seq comes from the counter (``seq`` is filled in)."""
        if allocate:
            doc = {**doc, "seq": await self.kit.events.allocate_seq(doc["tenant_id"])}
        if self.backend is not None:
            self.backend.events.insert_now(doc, allocated=False)
        else:
            from bson import Decimal128

            doc = {k: Decimal128(str(v)) if isinstance(v, Decimal) else v for k, v in doc.items()}
            await self.db["board_events"].insert_one(doc)

    async def card(self, t: str, card_id: str, doc: dict[str, Any]) -> None:
        await self.kit.put_raw_card(t, card_id, doc)

    async def row(self, doc: dict[str, Any]) -> None:
        await self.kit.insert_raw_row(doc)

    async def sub_doc(self, doc: dict[str, Any]) -> None:
        assert self.db is not None, "raw subscription documents: Mongo adapters only"
        await self.db["trigger_subscriptions"].insert_one(dict(doc))

    async def cursor(self, t: str, seq: object) -> None:
        if self.backend is not None:
            self.backend.cursors._cursors[t] = seq  # type: ignore[assignment]
        else:
            await self.db["trigger_cursors"].insert_one({"_id": t, "seq": seq})

    # --- running ---------------------------------------------------------------------------

    async def passes(self, healthy: str, n: int = PASSES) -> None:
        assert self.tail is not None and self.worker is not None
        for _ in range(n):
            await self.emit(healthy)
            self.kit.clock.advance(20.0)
            if self.pauses is not None:
                await self.pauses.refresh(force=True)
            await self.tail.drain_all()
            await self.worker.tick_any()

    def launched(self, t: str) -> int:
        return sum(1 for r in self.kit.launcher.launches if r.tenant_id == t)


def _memory_rig() -> Rig:
    b = MemoryBackend()

    async def raw_event(doc: dict[str, Any]) -> None:
        b.events.insert_now(doc)

    async def raw_row(doc: dict[str, Any]) -> None:
        b.outbox.insert_raw(doc)

    async def raw_card(tenant: str, card_id: str, doc: dict[str, Any]) -> None:
        b.board.put_raw(tenant, card_id, doc)

    async def get_raw_row(key: str) -> dict[str, Any] | None:
        return b.outbox.raw(key)

    async def raw_limit(doc_id: str, doc: dict[str, Any]) -> None:
        b.limits.put_raw(doc_id, doc)

    async def raw_pause(doc_id: str, doc: dict[str, Any]) -> None:
        b.pauses.put_raw(doc_id, doc)

    kit = Kit(name="memory", events=b.events, cursors=b.cursors, outbox=b.outbox, subs=b.subs,
              cards=b.board, labels=b.board, readmodels=b.readmodels, insert_raw_event=raw_event,
              insert_raw_row=raw_row, put_raw_card=raw_card, raw_row=get_raw_row,
              limits=b.limits, put_raw_limit=raw_limit, pauses=b.pauses,
              put_raw_pause=raw_pause)
    return Rig("memory", kit, backend=b)


async def _mongomock_rig() -> Rig:
    from board_outbox.adapters.mongo import ensure_schema
    from tests.support.mongomock_async import mock_database

    db = mock_database()
    await ensure_schema(db)
    return Rig("mongomock", mongo_kit(db, "mongomock"), db=db)


Plant = Callable[[Rig, str], Awaitable[None]]


@dataclass(frozen=True)
class Case:
    id: str
    plant: Plant
    expect: str  # log | dead | flows
    match: str = ""  # in the one line (log), in the dead-letter's last error (dead)
    row_key: str = ""  # dead: the planted row's key ("{t}" is the tenant)
    later_flows: bool = False  # the bad tenant's next good event is still launched
    mongo_only: bool = False
    memory_only: bool = False  # mongomock cannot sort or compare the value (the wire can)
    flag: str = ""  # dead: the tail's one line before the dead-letter's (a kind nobody handles)


def _ev(t: str, **fields: Any) -> dict[str, Any]:
    return {"tenant_id": t, "type": "card.created", "card_id": "ok", "at": 1.0, **fields}


async def _good_then(rig: Rig, t: str, doc: dict[str, Any], allocate: bool = True) -> None:
    await rig.tenant(t)
    await rig.emit(t)
    await rig.event(doc, allocate=allocate)


def event_case(id: str, match: str, allocate: bool = True, memory_only: bool = False,
               **fields: Any) -> Case:
    async def plant(rig: Rig, t: str) -> None:
        await _good_then(rig, t, _ev(t, **fields), allocate)
    return Case(id, plant, "log", match, later_flows=True, memory_only=memory_only)


def card_case(id: str, match: str, **fields: Any) -> Case:
    async def plant(rig: Rig, t: str) -> None:
        await rig.tenant(t)
        doc = {"tenant_id": t, "card_id": "bad", "title": "x", "column": "inbox", **fields}
        await rig.card(t, "bad", {k: v for k, v in doc.items() if v is not _DROP})
        await rig.emit(t, "bad")
    return Case(id, plant, "log", match, later_flows=True)


def sub_case(id: str, match: str, doc: Callable[[str], dict[str, Any]],
             expect: str = "log") -> Case:
    async def plant(rig: Rig, t: str) -> None:
        await rig.tenant(t)
        await rig.sub_doc(doc(t))
        await rig.emit(t)
    return Case(id, plant, expect, match, later_flows=True, mongo_only=True)


def row_case(id: str, match: str, **fields: Any) -> Case:
    async def plant(rig: Rig, t: str) -> None:
        await rig.tenant(t)
        doc = {"tenant_id": t, "row_key": f"{t}/9/sub/{t}-sub", "seq": 9, "kind": "launch",
               "sub_id": f"{t}-sub", "state": "pending", "attempts": 0, "not_before": 0.0,
               "errors": [], "updated_at": 0.0}
        doc.update(fields)
        await rig.row({k: v for k, v in doc.items() if v is not _DROP})
    return Case(id, plant, "dead", match, row_key="{t}/9/sub/{t}-sub")


_DROP = object()
_PAST = 1.0  # a lease that ended long ago (the manual clock starts far later)


def _sub(t: str, **fields: Any) -> dict[str, Any]:
    return {"_id": f"{t}-bad", "sub_id": f"{t}-bad", "tenant_id": t, "bot": "b",
            "rule": {"event_types": ["card.created"]}, **fields}


async def _slash_tenant(rig: Rig, t: str) -> None:
    bad = f"{t}/x"
    await rig.kit.subs.put(Subscription(sub_id=f"{t}-sub", tenant_id=t, bot="b"))
    await rig.kit.cards.put(Card(tenant_id=bad, card_id="ok", title="ok"))
    await rig.kit.emit(bad, "card.created", "ok")
    if rig.db is not None:
        await rig.db["trigger_subscriptions"].update_one({"_id": f"{t}-sub"},
                                                         {"$set": {"tenant_id": bad}})
    else:
        assert rig.backend is not None
        rig.backend.subs._subs[f"{t}-sub"] = Subscription(sub_id=f"{t}-sub", tenant_id=bad, bot="b")


async def _space_tenant(rig: Rig, t: str) -> None:
    await rig.kit.emit(f"{t} x", "card.created", "ok")  # a tenant with events only
    await rig.tenant(t)
    # the tail drains event-only tenants when projections are on; the rig has none: give the
    # odd tenant a subscription written by someone else
    if rig.db is not None:
        await rig.db["trigger_subscriptions"].insert_one(
            {"_id": f"{t}-sp", "sub_id": f"{t}-sp", "tenant_id": f"{t} x", "bot": "b"})
    else:
        assert rig.backend is not None
        s = Subscription(sub_id=f"{t}-sp", tenant_id=f"{t} x", bot="b")
        rig.backend.subs._subs[s.sub_id] = s
        rig.backend.subs._by_tenant.setdefault(s.tenant_id, {})[s.sub_id] = s


def pause_case(id: str, match: str, doc: Callable[[str, str], tuple[str, dict[str, Any]]]
               ) -> Case:
    """Issue 33: a pause document someone else wrote, ``doc(tenant, healthy) -> (_id, doc)``:
    one line; it pauses nothing -- the bad tenant's next event launches, the healthy tenant's
    every event too."""
    async def plant(rig: Rig, t: str) -> None:
        await rig.tenant(t)
        assert rig.kit.put_raw_pause is not None
        await rig.kit.put_raw_pause(*doc(t, rig.healthy))
        await rig.emit(t)
    return Case(id, plant, "log", match, later_flows=True)


def _pause(t: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return f"tenant:{t}", {"scope": "tenant", "key": t, "active": True, "at": 1.0, **fields}


async def _held_by_no_pause(rig: Rig, t: str) -> None:
    """A row held for a pause that is not there (a replica held it, the pause was lifted and
    the replica died before it released it): the first read's sweep gives it back; it runs."""
    await rig.tenant(t)
    await rig.row({"tenant_id": t, "row_key": f"{t}/9/sub/{t}-sub", "seq": 9, "kind": "launch",
                   "sub_id": f"{t}-sub", "state": "pending", "attempts": 0,
                   "not_before": HELD_OFFSET + 1.0, "waiting": f"paused: tenant {t}",
                   "event": {"seq": 9, "type": "card.created", "card_id": "ok"}})


async def _launched_event(rig: Rig, t: str, at: float) -> None:
    """A good event whose ``at`` is out of the time range: it launches like any."""
    await rig.tenant(t)
    await rig.event(_ev(t, at=at))


async def _runnable_row(rig: Rig, t: str, **fields: Any) -> None:
    await rig.tenant(t)
    await rig.row({"tenant_id": t, "row_key": f"{t}/9/sub/{t}-sub", "seq": 9, "kind": "launch",
                   "sub_id": f"{t}-sub", "state": "pending", "attempts": 0, "not_before": 0.0,
                   "event": {"seq": 9, "type": "card.created", "card_id": "ok"}, **fields})


async def _history_with_a_bad_time(rig: Rig, t: str) -> None:
    """A pending retry whose second error entry is dated in milliseconds: claimed, parked as
    malformed -- with the entries that do decode kept in its history."""
    await rig.tenant(t)
    await rig.row({"tenant_id": t, "row_key": f"{t}/9/sub/{t}-sub", "seq": 9, "kind": "launch",
                   "sub_id": f"{t}-sub", "state": "pending", "attempts": 2, "not_before": 0.0,
                   "updated_at": 0.0,
                   "errors": [{"attempt": 1, "at": 5.0, "error": "first", "kind": "error"},
                              {"attempt": 2, "at": 1e12, "error": "second", "kind": "error"}]})


def cursor_case(id: str, seq: object) -> Case:
    async def plant(rig: Rig, t: str) -> None:
        await rig.tenant(t)
        await rig.cursor(t, seq)
        await rig.emit(t)
    return Case(id, plant, "log", "tenant stalled")


async def _card_with_slash_id(rig: Rig, t: str) -> None:
    await rig.tenant(t)
    await rig.kit.cards.put(Card(tenant_id=t, card_id="a/b", title="x"))
    await rig.emit(t, "a/b")


async def _sub_id_mismatch(rig: Rig, t: str) -> None:
    await rig.kit.cards.put(Card(tenant_id=t, card_id="ok", title="ok"))
    await rig.sub_doc({"_id": f"{t}-other", "sub_id": f"{t}-s", "tenant_id": t, "bot": "b"})
    await rig.emit(t)


async def _limited_sub(rig: Rig, t: str, **limits: Any) -> None:
    await rig.kit.cards.put(Card(tenant_id=t, card_id="ok", title="ok"))
    await rig.kit.subs.put(Subscription(sub_id=f"{t}-lim", tenant_id=t, bot="b",
                                        rule=MatchRule(event_types=("card.created",)), **limits))


async def _garbage_slot(rig: Rig, t: str) -> None:
    """F2: the one in-flight slot of the tenant's bot, written by someone else with garbage
    fields (an expiry that is not a number, a holder that is a list): taken over, not held."""
    await _limited_sub(rig, t, max_in_flight=1)
    assert rig.kit.put_raw_limit is not None
    await rig.kit.put_raw_limit(slot_id(bot_key(t, "b"), 0),
                                {"key": 5, "holder": ["x"], "until": "never"})
    await rig.emit(t)


async def _infinite_slot(rig: Rig, t: str) -> None:
    """Issue 30: a slot held until Infinity (a number to the store, so its filter never freed
    it): taken over, one line naming it."""
    await _limited_sub(rig, t, max_in_flight=1)
    assert rig.kit.put_raw_limit is not None
    await rig.kit.put_raw_limit(slot_id(bot_key(t, "b"), 0),
                                {"key": bot_key(t, "b"), "holder": "x", "until": float("inf")})
    await rig.emit(t)


async def _ghost_slot(rig: Rig, t: str) -> None:
    """Issue 30: a slot held for a month (further ahead than any lease): taken over."""
    await _limited_sub(rig, t, max_in_flight=1)
    assert rig.kit.put_raw_limit is not None
    await rig.kit.put_raw_limit(slot_id(bot_key(t, "b"), 0),
                                {"key": bot_key(t, "b"), "holder": "x",
                                 "until": rig.kit.clock.now() + 30 * 86400})
    await rig.emit(t)


async def _negative_counter(rig: Rig, t: str) -> None:
    """Issue 30: a rate counter at ``n: -1000`` would open its window to a thousand launches;
    that window stays shut, the next ones count again (the row waits, no attempt spent)."""
    await _limited_sub(rig, t, max_per_second=5)
    assert rig.kit.put_raw_limit is not None
    cid, _n, _end = rate_slot(bot_key(t, "b"), 5, rig.kit.clock.now() + 20.0)
    await rig.kit.put_raw_limit(cid, {"n": -1000})
    await rig.emit(t)


async def _garbage_counter(rig: Rig, t: str) -> None:
    """F2: the rate counter of the window now, with a count that is not a count: that window
    stays shut (the row waits, no attempt spent), the next ones count again."""
    await _limited_sub(rig, t, max_per_second=5)
    assert rig.kit.put_raw_limit is not None
    # the window of the first pass's tick (each pass moves the clock 20 s before it drains)
    cid, _n, _end = rate_slot(bot_key(t, "b"), 5, rig.kit.clock.now() + 20.0)
    await rig.kit.put_raw_limit(cid, {"n": "lots"})
    await rig.emit(t)


async def _huge_extra_field(rig: Rig, t: str) -> None:
    await _good_then(rig, t, _ev(t, junk="j" * 200_000))


async def _array_tenant_sub(rig: Rig, t: str) -> None:
    # names the healthy tenant too: its every batch lists it (it used to log on each one)
    await rig.sub_doc({"_id": f"{t}-arr", "sub_id": f"{t}-arr", "tenant_id": [t, rig.healthy],
                       "bot": "b"})
    await rig.tenant(t)
    await rig.emit(t)


def bad_kind_case(id: str, match: str, kind: object) -> Case:
    """A subscription whose effect kind is not a kind (written around ``put``, which refuses it):
    only it is ignored, with one line; the tenant's other subscription still launches."""
    async def plant(rig: Rig, t: str) -> None:
        await rig.tenant(t)
        if rig.db is not None:
            await rig.sub_doc(_sub(t, kind=kind))
        else:
            assert rig.backend is not None
            s = Subscription(sub_id=f"{t}-bad", tenant_id=t, bot="b",
                             kind=kind)  # type: ignore[arg-type]
            rig.backend.subs._subs[s.sub_id] = s
            rig.backend.subs._by_tenant.setdefault(t, {})[s.sub_id] = s
        await rig.emit(t)
    return Case(id, plant, "log", match, later_flows=True)


def bad_priority_case(id: str, priority: object) -> Case:
    """A subscription whose priority is not a whole number from -10 to 10 (issue 33): only it
    is ignored, with one line; the tenant's other subscription still launches. On the Mongo
    adapters the raw document (its decode refuses it); on the twin the struct as stored."""
    async def plant(rig: Rig, t: str) -> None:
        await rig.tenant(t)
        if rig.db is not None:
            await rig.sub_doc(_sub(t, priority=priority))
        else:
            assert rig.backend is not None
            s = Subscription(sub_id=f"{t}-bad", tenant_id=t, bot="b",
                             rule=MatchRule(event_types=("card.created",)),
                             priority=priority)  # type: ignore[arg-type]
            rig.backend.subs._subs[s.sub_id] = s
            rig.backend.subs._by_tenant.setdefault(t, {})[s.sub_id] = s
        await rig.emit(t)
    return Case(id, plant, "log", "ignoring malformed subscription", later_flows=True)


async def _unhandled_kind(rig: Rig, t: str) -> None:
    """A subscription of a kind no handler is registered for, matching card.moved: its row is
    written and dead-letters with the reason; the tail says so once."""
    await rig.tenant(t)
    await rig.kit.subs.put(Subscription(sub_id=f"{t}-page", tenant_id=t, bot="oncall", kind="page",
                                        rule=MatchRule(event_types=("card.moved",))))
    await rig.kit.emit(t, "card.moved", "ok")


# issue 30: trace ids another writer planted in a row's trace context (``int(x, 16)`` takes all
# of them; a W3C trace id is 32 lowercase hex digits, not all zeros)
PLANTED_TRACE_IDS = ["0x" + "c" * 30, "c" * 31 + "\n", "\n" + "c" * 31, "C" * 32, "0" * 32,
                     " " + "c" * 31, "cccc_ccccccccccccccccccccccccccc", "c" * 33]


def _traced_row(t: str, seq: int, trace_id: str, now: float) -> Any:
    ev = EventSnapshot(seq=seq, type="card.created", card_id="ok", at=now)
    return new_launch_row(t, ev, Subscription(sub_id=f"{t}-sub", tenant_id=t, bot="bot"),
                          now=now, trace=TraceContext(traceparent=f"00-{trace_id}-b7ad6b7169203331-01"))


async def _planted_trace_ids(rig: Rig, t: str) -> None:
    """Pending launch rows whose trace ids were planted: they run as any row, with no line;
    neither the console nor an exemplar shows such an id
    (``test_planted_trace_ids_are_shown_nowhere``)."""
    await rig.tenant(t)
    await rig.kit.outbox.upsert_rows([_traced_row(t, seq, bad, rig.kit.clock.now())
                                      for seq, bad in enumerate(PLANTED_TRACE_IDS, start=90)])


async def _huge_consume(rig: Rig, t: str) -> None:
    await rig.tenant(t)
    labels = tuple(f"l{i}" for i in range(10_000))
    await rig.kit.subs.put(Subscription(sub_id=f"{t}-big", tenant_id=t, bot="b",
                                        consume_labels=labels))
    await rig.emit(t)


_TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
_TRACE_LINE = "stored trace context not usable"

CASES: list[Case] = [
    # --- events ---------------------------------------------------------------------------
    event_case("event-seq-float", "is not an integer seq", allocate=False, seq=2.5),
    event_case("event-seq-decimal", "is not an integer seq", allocate=False, memory_only=True,
               seq=Decimal("1.5")),
    event_case("event-seq-int64-max", "beyond the tenant's allocated counter", allocate=False,
               seq=2**63 - 1),
    event_case("event-seq-other-counter", "beyond the tenant's allocated counter",
               allocate=False, seq=1_000_000),
    event_case("event-type-missing", "poison", type=None),
    event_case("event-type-empty", "poison", type=""),
    event_case("event-card-id-int", "poison", card_id=42),
    event_case("event-card-id-empty", "poison", card_id=""),
    event_case("event-at-string", "poison", at="yesterday"),
    event_case("event-actor-int", "poison", actor=7),
    event_case("event-type-list", "poison", type=["card.created"]),
    # R7: the board's time is only read: out of range it reads as none, one line; it runs
    Case("event-at-milliseconds", lambda rig, t: _launched_event(rig, t, 1e12), "log",
         "at 1000000000000.0 is out of range", later_flows=True),
    Case("event-at-minus-infinity", lambda rig, t: _launched_event(rig, t, float("-inf")), "log",
         "at -inf is out of range", later_flows=True),
    Case("event-huge-extra-field", _huge_extra_field, "flows", later_flows=True),
    # a producer's trace context (C7): a bad one costs only the event's parentage (its rows
    # still launch: tests/test_trace_context.py), one line per tenant and problem
    event_case("event-trace-string", _TRACE_LINE, trace="00-" + "c" * 32),
    event_case("event-trace-list", _TRACE_LINE, trace=[{"traceparent": _TP}]),
    event_case("event-traceparent-garbage", _TRACE_LINE, trace={"traceparent": "0x" + "c" * 50}),
    event_case("event-traceparent-int", _TRACE_LINE, trace={"traceparent": 7}),
    event_case("event-traceparent-1mb", _TRACE_LINE, trace={"traceparent": "0" * 1_000_000}),
    event_case("event-tracestate-10k", _TRACE_LINE, trace={"traceparent": _TP,
                                                           "tracestate": "k=" + "v" * 10_000}),
    event_case("event-tracestate-int", _TRACE_LINE, trace={"traceparent": _TP, "tracestate": 5}),
    event_case("event-tracestate-garbage", _TRACE_LINE,
               trace={"traceparent": _TP, "tracestate": "no state,\n=="}),
    # --- cards ----------------------------------------------------------------------------
    card_case("card-title-200k", "poison", title="t" * 200_000),
    card_case("card-labels-string", "poison", labels="urgent"),
    card_case("card-labels-5000", "poison", labels=[f"l{i}" for i in range(5000)]),
    card_case("card-column-int", "poison", column=3),
    card_case("card-title-none", "poison", title=None),
    card_case("card-tenant-missing", "poison", tenant_id=_DROP),
    card_case("card-labels-ints", "poison", labels=[1, 2]),
    Case("card-id-with-slash", _card_with_slash_id, "flows", later_flows=True),
    # --- subscriptions --------------------------------------------------------------------
    Case("sub-consume-labels-10000", _huge_consume, "log", "consume_labels has 10000",
         later_flows=True),
    sub_case("sub-tenant-array", "ignoring malformed subscription",
             lambda t: _sub(t, tenant_id=[t])),
    sub_case("sub-rule-string", "ignoring malformed subscription", lambda t: _sub(t, rule="x")),
    sub_case("sub-enabled-string", "ignoring malformed subscription",
             lambda t: _sub(t, enabled="yes")),
    sub_case("sub-bot-missing", "ignoring malformed subscription",
             lambda t: {k: v for k, v in _sub(t).items() if k != "bot"}),
    sub_case("sub-labels-all-500", "labels_all has 500",
             lambda t: _sub(t, rule={"labels_all": [f"l{i}" for i in range(500)]})),
    sub_case("sub-consume-labels-int", "ignoring malformed subscription",
             lambda t: _sub(t, consume_labels=5)),
    Case("sub-id-differs-from-sub-id", _sub_id_mismatch, "flows", mongo_only=True),
    Case("sub-tenant-array-names-healthy", _array_tenant_sub, "log",
         "ignoring malformed subscription", later_flows=True, mongo_only=True),
    bad_kind_case("sub-kind-with-slash", "invalid kind 'no/such'", "no/such"),
    bad_kind_case("sub-kind-projection", "invalid kind 'projection'", "projection"),
    bad_kind_case("sub-kind-empty", "invalid kind ''", ""),
    sub_case("sub-kind-int", "ignoring malformed subscription", lambda t: _sub(t, kind=7)),
    # its rows' keys would carry the slash (or newline): no command could address them
    sub_case("sub-id-with-slash", "invalid sub_id", lambda t: _sub(t, sub_id=f"{t}/x")),
    sub_case("sub-id-with-newline", "invalid sub_id", lambda t: _sub(t, sub_id=f"{t}\n")),
    # a launch at nobody, or at a name no one can type to pause it
    sub_case("sub-bot-empty", "invalid bot ''", lambda t: _sub(t, bot="")),
    sub_case("sub-bot-with-newline", "invalid bot", lambda t: _sub(t, bot="pager\n")),
    sub_case("sub-bot-padded", "invalid bot", lambda t: _sub(t, bot=" pager")),
    # F2: a subscription's own limits
    sub_case("sub-max-in-flight-negative", "ignoring malformed subscription",
             lambda t: _sub(t, max_in_flight=-1)),
    sub_case("sub-max-in-flight-bool", "ignoring malformed subscription",
             lambda t: _sub(t, max_in_flight=True)),
    sub_case("sub-max-in-flight-string", "ignoring malformed subscription",
             lambda t: _sub(t, max_in_flight="2")),
    sub_case("sub-max-per-second-string", "ignoring malformed subscription",
             lambda t: _sub(t, max_per_second="fast")),
    sub_case("sub-max-per-second-too-slow", "max_per_second: 1e-05 per second is below",
             lambda t: _sub(t, max_per_second=1e-5)),
    # issue 33: a coalescing window of 0, of 10^9, not a number, or a quiet time above the wait
    sub_case("sub-coalesce-window-0", "ignoring malformed subscription",
             lambda t: _sub(t, coalesce={"quiet_seconds": 0, "max_wait_seconds": 0})),
    sub_case("sub-coalesce-window-1e9", "ignoring malformed subscription",
             lambda t: _sub(t, coalesce={"quiet_seconds": 5, "max_wait_seconds": 1e9})),
    sub_case("sub-coalesce-window-nan", "ignoring malformed subscription",
             lambda t: _sub(t, coalesce={"quiet_seconds": float("nan"),
                                         "max_wait_seconds": 60})),
    sub_case("sub-coalesce-quiet-above-max-wait", "is above max_wait_seconds",
             lambda t: _sub(t, coalesce={"quiet_seconds": 60, "max_wait_seconds": 10})),
    sub_case("sub-coalesce-string", "ignoring malformed subscription",
             lambda t: _sub(t, coalesce="30s")),
    # issue 33: a subscription's priority
    bad_priority_case("sub-priority-string", "high"),
    bad_priority_case("sub-priority-huge", 10**9),
    bad_priority_case("sub-priority-float", -1e9),
    bad_priority_case("sub-priority-nan", float("nan")),
    bad_priority_case("sub-priority-bool", True),
    Case("limit-slot-garbage", _garbage_slot, "log", "is not a finite number: taken over",
         later_flows=True),
    Case("limit-slot-infinite", _infinite_slot, "log", "is not a finite number: taken over",
         later_flows=True),
    Case("limit-slot-ghost-for-a-month", _ghost_slot, "log", "s ahead: taken over",
         later_flows=True),
    Case("limit-counter-negative", _negative_counter, "flows", later_flows=True),
    Case("limit-counter-garbage", _garbage_counter, "flows", later_flows=True),
    Case("sub-kind-nobody-handles", _unhandled_kind, "dead",
         "no effect handler registered for kind 'page'", row_key="{t}/1/sub/{t}-page",
         later_flows=True, flag="names effect kind 'page', which no handler is registered for"),
    # --- rows -----------------------------------------------------------------------------
    row_case("row-reclaim-attempts-string", "row broke its claim", state="claimed",
             claim_id="x", lease_until=_PAST, attempts="3"),
    row_case("row-reclaim-errors-string", "row broke its claim", state="claimed",
             claim_id="x", lease_until=_PAST, errors="boom"),
    row_case("row-pending-attempts-string", "malformed row", attempts="3"),
    row_case("row-pending-errors-string", "malformed row", errors="boom"),
    row_case("row-state-weird", "unclaimable row: state 'weird'", state="weird"),
    row_case("row-state-missing", "unclaimable row: state None", state=_DROP),
    row_case("row-not-before-string", "unclaimable row: pending with not_before",
             not_before="soon"),
    row_case("row-not-before-missing", "unclaimable row: pending with not_before",
             not_before=_DROP),
    row_case("row-tenant-int", "unclaimable row: tenant_id", tenant_id=5),
    row_case("row-claimed-no-lease", "unclaimable row: claimed with lease_until None",
             state="claimed", claim_id="x", lease_until=_DROP),
    row_case("row-claimed-lease-1e12", "more than 86400s ahead", state="claimed",
             claim_id="x", lease_until=1e12),
    row_case("row-seq-string", "malformed row", seq="x"),
    row_case("row-kind-unknown", "no effect handler registered", kind="teleport",
             event={"seq": 9, "type": "card.created", "card_id": "ok"}),
    row_case("row-event-string", "malformed row", event="x"),
    row_case("row-trace-string", "malformed row", trace="00-abc"),
    row_case("row-consume-marked-string", "malformed row", consume_marked="yes"),
    # --- times out of range (R7): claimed and parked, or swept; never a crash ----------------
    row_case("row-not-before-milliseconds", "due further ahead than any writer sets one",
             not_before=1e12),
    row_case("row-not-before-infinite", "pending with not_before inf", not_before=float("inf")),
    row_case("row-not-before-minus-1e308", "not_before -1e+308 is out of range",
             not_before=-1e308),
    row_case("row-created-at-minus-1e15", "created_at -1000000000000000.0 is out of range",
             created_at=-1e15),
    # its claim writes updated_at before the row is decoded: it runs
    Case("row-updated-at-infinite", lambda rig, t: _runnable_row(rig, t, updated_at=float("inf")),
         "flows"),
    Case("row-error-at-milliseconds", lambda rig, t: _history_with_a_bad_time(rig, t), "dead",
         "errors[1].at 1000000000000.0 is out of range", row_key="{t}/9/sub/{t}-sub"),
    row_case("row-lease-until-1e20", "more than 86400s ahead", state="claimed", claim_id="x",
             lease_until=1e20),
    # --- pauses (issue 33) ------------------------------------------------------------------
    pause_case("pause-scope-unknown", "is not one of tenant, subscription, bot",
               lambda t, _h: (f"galaxy:{t}", {**_pause(t)[1], "scope": "galaxy"})),
    pause_case("pause-active-string", "active 'yes' is not true or false",
               lambda t, _h: _pause(t, active="yes")),
    pause_case("pause-key-a-list", "is not a string", lambda t, _h: _pause(t, key=[t])),
    pause_case("pause-at-infinite", "at inf is out of range",
               lambda t, _h: _pause(t, at=float("inf"))),
    # R7: a JavaScript writer's milliseconds (its year 33658 made `paused` and every console
    # page that lists the pauses raise)
    pause_case("pause-at-milliseconds", "at 1000000000000.0 is out of range",
               lambda t, _h: _pause(t, at=1e12)),
    pause_case("pause-audit-at-milliseconds", "audit[0].at 1000000000000.0 is out of range",
               lambda t, _h: _pause(t, audit=[{"at": 1e12, "action": "pause", "by": "js"}])),
    pause_case("pause-reason-16k", "reason is 16384 characters long",
               lambda t, _h: _pause(t, reason="x" * 16384)),
    pause_case("pause-audit-garbage", "audit", lambda t, _h: _pause(t, audit=[{"at": "x"}])),
    # its _id names the bad tenant, its key the healthy one: it pauses neither
    pause_case("pause-id-names-the-healthy-tenant", "does not name",
               lambda t, h: (f"tenant:{t}", _pause(h)[1])),
    Case("row-held-by-no-pause", _held_by_no_pause, "flows"),
    # issue 33: claimed in its turn as a row at priority 0, then parked (it does not decode)
    row_case("row-priority-string", "malformed row", priority="high"),
    row_case("row-priority-huge", "malformed row", priority=10**9),
    row_case("row-priority-bool", "malformed row", priority=True),
    Case("row-trace-ids-planted", _planted_trace_ids, "flows", later_flows=True),
    # --- cursors and tenants --------------------------------------------------------------
    cursor_case("cursor-seq-string", "abc"),
    cursor_case("cursor-seq-float", 2.5),
    cursor_case("cursor-seq-bool", True),
    cursor_case("cursor-seq-negative", -1),
    Case("tenant-id-with-slash", _slash_tenant, "log", "tenant not drained"),
    Case("tenant-id-with-space", _space_tenant, "log", "tenant not drained"),
]


# the cases that also run on the wire server (each costs a fresh database there)
LIVE = {"event-seq-int64-max", "card-title-200k", "sub-tenant-array-names-healthy",
        "sub-id-differs-from-sub-id", "row-reclaim-attempts-string", "row-state-weird",
        "cursor-seq-string", "tenant-id-with-slash", "limit-slot-garbage",
        "limit-counter-garbage", "limit-slot-infinite", "limit-slot-ghost-for-a-month",
        "limit-counter-negative", "pause-active-string", "pause-id-names-the-healthy-tenant",
        "row-held-by-no-pause", "sub-priority-huge", "sub-priority-nan",
        "row-priority-string", "row-priority-huge", "event-at-milliseconds",
        "row-not-before-milliseconds", "row-not-before-minus-1e308", "row-created-at-minus-1e15",
        "row-error-at-milliseconds", "pause-at-milliseconds", "event-traceparent-garbage",
        "event-tracestate-10k"}


def _params() -> list[Any]:
    out = []
    for case in CASES:
        for backend in ("memory", "mongomock", "mongo-live"):
            if (case.mongo_only and backend == "memory") or (
                    case.memory_only and backend != "memory"):
                continue
            if backend == "mongo-live":
                if case.id in LIVE:
                    out.append(pytest.param(case, backend, id=f"{backend}-{case.id}",
                                            marks=pytest.mark.live_mongo))
                continue
            out.append(pytest.param(case, backend, id=f"{backend}-{case.id}"))
    return out


def test_the_corpus_is_big_enough() -> None:
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.anyio
@pytest.mark.parametrize(("case", "backend"), _params())
async def test_bad_document(case: Case, backend: str, caplog: pytest.LogCaptureFixture,
                            request: pytest.FixtureRequest) -> None:
    if backend == "mongo-live":
        from tests.conftest import live_database

        async with live_database(request.getfixturevalue("live_uri")) as db:
            await _run_case(case, Rig("mongo-live", mongo_kit(db, "mongo-live"), db=db), caplog)
        return
    await _run_case(case, _memory_rig() if backend == "memory" else await _mongomock_rig(),
                    caplog)


async def _run_case(case: Case, rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    # unique per backend: the once-per-problem logs are per process
    t = f"{rig.prefix}-{case.id}-{random.randrange(10**6)}"
    healthy = f"{rig.prefix}-healthy-{random.randrange(10**6)}"
    rig.healthy = healthy
    await rig.tenant(healthy)
    if rig.kit.pauses is not None:  # as the service wires it (issue 33)
        rig.pauses = PauseGate(rig.kit.pauses, rig.kit.outbox, rig.kit.clock, every=1.0)
    registry = build_registry(rig.kit.stores, [], pause=rig.pauses)
    rig.tail = rig.kit.tail(seed="earliest", poison_ticks=2, kinds=registry.kinds)  # as the service
    rig.worker = rig.kit.worker(registry=registry)
    rig.worker.pause = rig.pauses

    caplog.set_level(logging.WARNING, logger="board_outbox")
    await case.plant(rig, t)
    await rig.passes(healthy)  # raises if a pass would have ended the process
    launched_before = rig.launched(t)
    if case.later_flows:
        await rig.emit(t)
    await rig.passes(healthy)

    # the healthy tenant never noticed
    assert rig.launched(healthy) == 2 * PASSES
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    if case.expect == "flows":
        assert lines == []
        assert rig.launched(t) >= 1
    elif case.expect == "log":
        assert len(lines) == 1, lines
        assert case.match in lines[0]
    else:
        key = case.row_key.format(t=t)
        raw = await rig.kit.raw_row(key)
        assert raw is not None and raw["state"] == "failed", raw
        dead = await rig.kit.outbox.find(dead_letter_filter(None, None, None, 1000))
        (row,) = [r for r in dead if r.row_key == key]  # dead-letters list shows it
        assert case.match in row.errors[-1].error
        if case.flag:
            assert len(lines) == 2 and case.flag in lines[0], lines
        else:
            assert len(lines) == 1, lines
        assert "parked as dead-letter" in lines[-1], lines
        assert await rig.kit.outbox.purge(RowFilter(tenant_id=row.tenant_id, limit=10)) == 1
    if case.later_flows:
        assert rig.launched(t) == launched_before + 1


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["memory", "mongomock"])
async def test_planted_trace_ids_are_shown_nowhere(backend: str) -> None:
    """Issue 30: rows with planted trace ids run (each launched), and no page of the console
    and no exemplar on /metrics carries their ids -- only the one valid id of a row beside them."""
    import re

    import httpx

    from board_outbox.engine.telemetry.metrics import Metrics
    from board_outbox.service.config import load_config
    from board_outbox.surface.console import build_console
    from board_outbox.surface.http.metrics import exposition

    rig = _memory_rig() if backend == "memory" else await _mongomock_rig()
    t, good = "traced", "4bf92f3577b34da6a3ce929d0e0e4736"
    await _planted_trace_ids(rig, t)
    await rig.kit.outbox.upsert_rows([_traced_row(t, 99, good, rig.kit.clock.now())])
    rig.tail, rig.worker = rig.kit.tail(seed="earliest"), rig.kit.worker()
    await rig.passes("healthy")
    assert rig.launched(t) == len(PLANTED_TRACE_IDS) + 1
    rows = await rig.kit.outbox.find(RowFilter(tenant_id=t, limit=100))
    assert len(rows) == len(PLANTED_TRACE_IDS) + 1 and all(r.state == "done" for r in rows)
    metrics = Metrics()
    metrics.rows_done(rows, rig.kit.clock.now())
    _ctype, body = exposition(metrics.prom.registry, "application/openmetrics-text; version=1.0.0")
    assert set(re.findall(r'# \{trace_id="([^"]*)"\}', body.decode())) == {good}
    app = build_console(rig.kit.stores, load_config(env={}, ui={"jaeger_url": "http://j"}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as client:
        for r in rows:
            page = (await client.get(f"/rows/{r.row_key}")).text
            shown = re.findall(r'id="trace" href="http://j/trace/([^"]*)"', page)
            assert shown == ([good] if r.seq == 99 else []), (r.seq, shown)


# --- the two StoreErrors of the issue's item 1, with the store's own refusal -----------------


@pytest.mark.anyio
@pytest.mark.live_mongo
async def test_store_refusals_park_the_row_on_the_wire(live_db: Any) -> None:
    """On a real server: $inc on a string attempts (reclaim) and $push on a non-array errors
    (lease_expired) are StoreErrors; each parks its row, and the healthy tenant flows."""
    rig = Rig("mongo-live", mongo_kit(live_db, "mongo-live"), db=live_db)
    healthy, t = "healthy", "bad"
    await rig.tenant(healthy)
    await rig.tenant(t)
    base = {"tenant_id": t, "kind": "launch", "sub_id": f"{t}-sub", "state": "claimed",
            "claim_id": "x", "lease_until": _PAST, "not_before": 0.0, "updated_at": 0.0}
    await rig.row({**base, "row_key": "k1", "seq": 1, "attempts": "3", "errors": []})
    await rig.row({**base, "row_key": "k2", "seq": 2, "attempts": 0, "errors": "boom"})
    rig.tail = rig.kit.tail(seed="earliest")
    rig.worker = rig.kit.worker()
    await rig.passes(healthy, 2)
    assert rig.launched(healthy) == 2
    for key in ("k1", "k2"):
        raw = await rig.kit.raw_row(key)
        assert raw is not None and raw["state"] == "failed"
        assert "row broke its claim" in raw["errors"][-1]["error"]
        assert len(raw["errors"][-1]["error"]) <= 2000


@pytest.mark.anyio
@pytest.mark.live_mongo
async def test_huge_card_and_decimal_seq_on_the_wire(live_db: Any,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Issue 14 items 1 and 2: a huge card title (reported at 16 MiB minus 400 characters, where
    the row upsert exceeded 16 MB; 4 MiB here to keep the suite fast -- anything over
    ``MAX_CARD_TITLE`` takes the same path) and a NumberDecimal seq. Each costs its one event,
    with one line each; the tenant's later events and the healthy tenant flow."""
    from bson import Decimal128

    rig = Rig("mongo-live", mongo_kit(live_db, "mongo-live"), db=live_db)
    healthy, t = "healthy", "bad"
    rig.healthy = healthy
    for x in (healthy, t):
        await rig.tenant(x)
    await rig.emit(t)  # seq 1
    await rig.card(t, "huge", {"tenant_id": t, "card_id": "huge", "title": "t" * 2**22})
    await rig.emit(t, "huge")  # seq 2
    await live_db["board_events"].insert_one(_ev(t, seq=Decimal128("2.5")))
    registry = rig.kit.registry()
    rig.tail = rig.kit.tail(seed="earliest", poison_ticks=2, kinds=registry.kinds)  # as the service
    rig.worker = rig.kit.worker(registry=registry)
    caplog.set_level(logging.WARNING, logger="board_outbox")
    await rig.passes(healthy, 3)
    await rig.emit(t)  # seq 3
    await rig.passes(healthy, 2)
    assert rig.launched(healthy) == 5
    assert sorted(r.seq for r in rig.kit.launcher.launches if r.tenant_id == t) == [1, 3]
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 2, lines
    assert any("is not an integer seq" in m for m in lines)
    assert any("poison" in m and f"title of {2**22} characters" in m for m in lines)
    assert all(len(m) < 3000 for m in lines)


@pytest.mark.anyio
async def test_a_batch_of_nothing_but_non_int_seqs_ends_the_drain(
        caplog: pytest.LogCaptureFixture) -> None:
    rig = _memory_rig()
    await rig.tenant("t")
    await rig.emit("t")
    for x in (1.25, 1.5, 1.75):
        await rig.event(_ev("t", seq=x), allocate=False)
    tail = rig.kit.tail(seed="earliest", batch_size=2)
    with anyio.fail_after(5):
        results = await tail.drain_all(["t"])
    assert results[-1].cursor_after == 1 and results[-1].stopped == "poison"
    assert sum("is not an integer seq" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.anyio
async def test_rebuild_stops_at_poison_seqs_instead_of_looping() -> None:
    from board_outbox.surface.admin import rebuild_projection

    rig = _memory_rig()
    await rig.tenant("t")
    await rig.emit("t")
    await rig.event(_ev("t", seq=1.5), allocate=False)
    await rig.event(_ev("t", seq=2**63 - 1), allocate=False)
    with anyio.fail_after(5):
        res = await rebuild_projection(
            name="board-reflect", tenant_id="t", registry=rig.kit.registry(["board-reflect"]),
            events=rig.kit.events, cards=rig.kit.cards, clock=rig.kit.clock,
            young_gap_seconds=30.0)
    assert (res.applied, res.cursor) == (1, 1)


@pytest.mark.anyio
async def test_an_unexpected_data_error_stalls_one_tenant_not_the_pass(
        caplog: pytest.LogCaptureFixture) -> None:
    rig = _memory_rig()
    for t in ("good", "odd"):
        await rig.tenant(t)
        await rig.emit(t)
    assert rig.backend is not None
    real = rig.backend.board.get_many

    async def get_many(tenant_id: str, card_ids: Any) -> Any:
        if tenant_id == "odd":
            raise TypeError("'<' not supported between instances of 'str' and 'int'")
        return await real(tenant_id, card_ids)

    rig.backend.board.get_many = get_many  # type: ignore[method-assign]
    tail = rig.kit.tail(seed="earliest")
    worker = rig.kit.worker()
    for _ in range(3):
        await tail.drain_all()
        await worker.tick_any()
    assert rig.launched("good") == 1 and rig.launched("odd") == 0
    assert tail.stalled["odd"].startswith("TypeError")
    assert sum("tenant stalled" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.anyio
async def test_the_running_service_outlives_the_worst_documents(
        caplog: pytest.LogCaptureFixture) -> None:
    """The inputs that used to end the process, planted into a running ``Service`` (memory
    backend, real loops): it keeps running and the healthy tenant's events keep launching."""
    from board_outbox.service.config import load_config
    from board_outbox.service.runtime import Service

    b = MemoryBackend()
    for t in ("healthy", "r1", "c1", "e1", "e7"):
        await b.subs.put(Subscription(sub_id=f"{t}-sub", tenant_id=t, bot="b"))
        await b.board.put(Card(tenant_id=t, card_id="ok", title="ok"))
    b.outbox.insert_raw({"tenant_id": "r1", "row_key": "r1/k", "seq": 1, "state": "claimed",
                         "claim_id": "x", "lease_until": 0.0, "attempts": "3", "errors": "boom",
                         "not_before": 0.0, "sub_id": "r1-sub"})
    b.cursors._cursors["c1"] = "abc"  # type: ignore[assignment]
    await b.events.emit("c1", "card.created", "ok")
    await b.events.emit("e1", "card.created", "ok")
    b.events.insert_now(_ev("e1", seq=2**63 - 1), allocated=False)
    b.events.insert_now(_ev("e1", seq=1.5), allocated=False)
    # issue 20: a lease with a non-numeric expiry ended `run` at start on every replica; a
    # token that cannot be one; a generation pointer that does not parse
    b.members._leases["bad-member"] = "soon"  # type: ignore[assignment]
    b.tokens.token = "garbage"
    b.rm_versions._docs[("board-reflect", "ghost")] = {"active": "x"}  # type: ignore[assignment]
    # R7: times out of range in every loop's reads -- the pause loop, the status and metrics
    # refresh, the claims, membership
    b.pauses.put_raw("tenant:healthy", {"scope": "tenant", "key": "healthy", "active": True,
                                        "at": 1e12})
    b.members._leases["js-member"] = 1e12
    for seq, field in enumerate(("updated_at", "created_at", "not_before"), start=1):
        b.outbox.insert_raw({"tenant_id": "t7", "row_key": f"t7/{seq}/sub/t7-sub", "seq": seq,
                             "sub_id": "t7-sub", "state": "failed" if seq == 1 else "pending",
                             "not_before": 0.0, field: -1e308 if seq == 3 else float("inf")})
    await b.events.emit("e7", "card.created", "ok", at=1e12)  # read as no time: it runs
    config = load_config(env={}, tail={"poll_interval_seconds": 0.05, "seed": "earliest"},
                         worker={"idle_seconds": 0.02})
    service = Service(b.stores(), config, rng=random.Random(1))

    def launched(t: str) -> int:
        return sum(1 for r in b.launcher.launches if r.tenant_id == t)

    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        with anyio.fail_after(10):
            for i in range(1, 4):
                await b.events.emit("healthy", "card.created", "ok")
                while launched("healthy") < i:
                    await anyio.sleep(0.01)
            await b.events.emit("e1", "card.created", "ok")  # seq 2: after the poison, flows
            while launched("e1") < 2:
                await anyio.sleep(0.01)
            while b.outbox.raw("r1/k")["state"] != "failed":  # type: ignore[index]
                await anyio.sleep(0.01)
            while any(b.outbox.raw(f"t7/{seq}/sub/t7-sub")["state"] != "failed"  # type: ignore[index]
                      for seq in (2, 3)):  # claimed, malformed: parked
                await anyio.sleep(0.01)
            while launched("e7") < 1:
                await anyio.sleep(0.01)
        assert not service.stopping
        service.stop()
    assert "c1" in service.tail.stalled
    assert launched("c1") == 0


# --- issue 20: the service's own collections, parsed per document ---------------------------
#
# Members, generation pointers, resume tokens, counters and cursors: each bad document costs
# only itself (one line, BAD_DOCUMENTS lists and counts it), on the memory twins, on the Mongo
# adapters (mongomock) and, where the wire decides, on the wire server.

SIDES = ["memory", "mongomock", pytest.param("mongo-live", marks=pytest.mark.live_mongo)]


@dataclass
class Side:
    """One backend's full ``Stores`` plus raw planting into the service's own collections."""

    name: str
    stores: Any
    backend: MemoryBackend | None = None
    db: Any = None

    async def member(self, member_id: object, expires_at: object) -> None:
        if self.backend is not None:
            self.backend.members._leases[member_id] = expires_at  # type: ignore[index,assignment]
        else:
            await self.db["board_outbox_members"].insert_one({"_id": member_id,
                                                              "expires_at": expires_at})

    async def pointer(self, model: str, tenant: str, doc: dict[str, Any]) -> None:
        if self.backend is not None:
            self.backend.rm_versions._docs[(model, tenant)] = doc  # type: ignore[assignment]
        else:
            await self.db["read_model_versions"].insert_one({"_id": f"{model}/{tenant}", **doc})

    async def token(self, value: object) -> None:
        if self.backend is not None:
            self.backend.tokens.token = value
        else:
            await self.db["board_outbox_state"].insert_one(
                {"_id": "resume_token:board_events", "token": value})

    async def counter(self, tenant: str, seq: object) -> None:
        if self.backend is not None:
            self.backend.events._counters[tenant] = seq  # type: ignore[assignment]
        else:
            await self.db["board_event_counters"].insert_one({"_id": tenant, "seq": seq})

    async def cursor(self, tenant: str, seq: object) -> None:
        if self.backend is not None:
            self.backend.cursors._cursors[tenant] = seq  # type: ignore[assignment]
        else:
            await self.db["trigger_cursors"].update_one({"_id": tenant}, {"$set": {"seq": seq}},
                                                        upsert=True)

    def launched(self, tenant: str) -> int:
        launcher = self.stores.launcher
        return sum(1 for r in launcher.launches if r.tenant_id == tenant)


@asynccontextmanager
async def open_side(name: str, request: pytest.FixtureRequest) -> AsyncIterator[Side]:
    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo import ensure_schema, mongo_stores

    if name == "memory":
        b = MemoryBackend()
        yield Side(name, b.stores(), backend=b)
    elif name == "mongomock":
        from tests.support.mongomock_async import mock_database

        mock: Any = mock_database()
        await ensure_schema(mock)
        yield Side(name, mongo_stores(mock, MemoryLauncher(), change_feed=False), db=mock)
    else:
        from tests.conftest import live_database

        async with live_database(request.getfixturevalue("live_uri")) as db:
            yield Side(name, mongo_stores(db, MemoryLauncher()), db=db)


def _uniq(prefix: str) -> str:
    """A key no other case used: the once-per-problem lines are per process."""
    return f"{prefix}-{random.randrange(10**9)}"


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.anyio
@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize(("bad_id", "expires_at", "match"), [
    ("string-expiry", "soon", "is not a number of seconds"),
    ("far-ahead", 10**10, "further ahead than the heartbeat timeout"),  # year 2286
    ("milliseconds", 1e12, "is out of range (epoch seconds from 1970-01-01 to 9999-12-31 UTC; "
                           "a millisecond timestamp?)"),  # R7
    (7, None, "is not a non-empty string"),
])
async def test_a_bad_membership_lease_is_not_a_member(
        side: str, bad_id: object, expires_at: object, match: str,
        caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest) -> None:
    """Item 1: a non-numeric expiry used to end `run` (and `status`) with a traceback on every
    replica; a lease far ahead, or a non-string member id, was a live member forever (its
    rendezvous share of the tenants never drained). Now each is left out, with one line."""
    from board_outbox.engine.flow.membership import MembershipSettings, Ownership
    from board_outbox.model.bad_documents import BAD_DOCUMENTS
    from board_outbox.model.clock import ManualClock

    clock = ManualClock()
    async with open_side(side, request) as s:
        key: object = _uniq(bad_id) if isinstance(bad_id, str) else random.randrange(10**9)
        await s.member(key, clock.now() + 5.0 if expires_at is None else expires_at)
        me = Ownership(s.stores.members, clock, member_id="me",
                       settings=MembershipSettings(heartbeat_timeout_seconds=10.0))
        caplog.set_level(logging.WARNING, logger="board_outbox")
        for _ in range(3):
            await me.beat()  # never raises
            clock.advance(1.0)
        assert me.members == ("me",)  # the bad lease is nobody: every tenant stays drained
        assert all(me.owns(f"t{i}") for i in range(50))
        lines = _lines(caplog)
        assert len(lines) == 1 and match in lines[0] and "board_outbox_members" in lines[0], lines
        assert any(d.collection == "board_outbox_members" and match in d.problem
                   for d in BAD_DOCUMENTS.current())


@pytest.mark.anyio
@pytest.mark.parametrize("side", ["memory", pytest.param("mongo-live", marks=pytest.mark.live_mongo)])
async def test_the_heartbeats_one_read_parses_each_member_and_pause_alone(
        side: str, request: pytest.FixtureRequest) -> None:
    """S6: the heartbeat reads the members and the pauses in one read. A bad lease and a bad
    pause document each cost only themselves there too: the good member and the good pause are
    read, the bad ones left out and listed."""
    from board_outbox.model.bad_documents import BAD_DOCUMENTS

    async with open_side(side, request) as s:
        bad_member, bad_pause = _uniq("bad-member"), _uniq("acme")
        await s.member(bad_member, "soon")
        await s.stores.pauses.pause("tenant", "good", reason="", by="ops", at=1.0)
        doc = {"scope": "galaxy", "key": bad_pause, "active": True, "reason": "", "by": "x",
               "at": 1.0}
        if s.backend is not None:
            s.backend.pauses.put_raw(f"galaxy:{bad_pause}", doc)
        else:
            await s.db["board_outbox_pauses"].insert_one({"_id": f"galaxy:{bad_pause}", **doc})
        live, pauses = await s.stores.members.heartbeat_with_pauses("me", 100.0, 10.0)
        assert [m.member_id for m in live] == ["me"]
        assert [(p.scope, p.key) for p in pauses] == [("tenant", "good")]
        listed = {(d.collection, d.key) for d in BAD_DOCUMENTS.current()}
        assert ("board_outbox_members", bad_member) in listed
        assert ("board_outbox_pauses", f"galaxy:{bad_pause}") in listed


@pytest.mark.anyio
async def test_status_lists_a_bad_lease_instead_of_crashing(
        capsys: pytest.CaptureFixture[str]) -> None:
    b = MemoryBackend()
    await b.subs.put(Subscription(sub_id="s", tenant_id="t", bot="b"))
    bad = _uniq("bad-member")
    b.members._leases[bad] = "soon"  # type: ignore[assignment]
    b.members._leases["ok-member"] = 1e18  # far ahead: not trusted, not listed as alive

    @asynccontextmanager
    async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
        yield b.stores()

    assert await anyio.to_thread.run_sync(lambda: main(["status", "--json"], factory=factory)) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["replicas"] == []
    assert {"collection": "board_outbox_members", "key": bad,
            "problem": "expires_at 'soon' is not a number of seconds (epoch seconds from "
                       "1970-01-01 to 9999-12-31 UTC)"} in doc["bad_documents"]
    assert [t["tenant_id"] for t in doc["tenants"]] == ["t"]


@pytest.mark.anyio
@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("doc", [{"active": "x"}, {"active": 0, "building": "soon"},
                                 {"active": 1.5}, {"active": 0, "progress": [1]}])
async def test_a_bad_generation_pointer_costs_only_its_read_model(
        side: str, doc: dict[str, Any], caplog: pytest.LogCaptureFixture,
        request: pytest.FixtureRequest) -> None:
    """Item 1: one malformed generation pointer (even for a tenant that does not exist) made
    every tenant's projection rows fail and park. Now only its own read model's writes fail."""
    from board_outbox.engine.upkeep.generations import VersionedReadModels
    from board_outbox.model.clock import ManualClock
    from board_outbox.model.errors import StoreError

    async with open_side(side, request) as s:
        ghost = _uniq("ghost")
        await s.pointer("board-reflect", ghost, doc)
        rm = VersionedReadModels(s.stores.readmodels, s.stores.rm_versions, ManualClock())
        caplog.set_level(logging.WARNING, logger="board_outbox")
        for tenant in ("healthy", "other"):
            assert await rm.upsert_if_newer("board-reflect", tenant, "k", 1, {"v": 1})
            assert (await rm.get("board-reflect", tenant, "k")) is not None
        assert await rm.write_many("card-activity", "healthy", []) == []
        with pytest.raises(StoreError, match="generation pointer of board-reflect/"):
            await rm.upsert_if_newer("board-reflect", ghost, "k", 1, {"v": 1})
        lines = _lines(caplog)
        assert len(lines) == 1 and "read_model_versions" in lines[0], lines


@pytest.mark.anyio
@pytest.mark.parametrize("side", SIDES)
async def test_a_bad_pointer_leaves_every_other_tenants_projection_rows_done(
        side: str, request: pytest.FixtureRequest) -> None:
    """The pipeline view of the case above: a running service, board-reflect on, a malformed
    pointer for a tenant that does not exist; the healthy tenant's projection rows all finish."""
    from board_outbox.service.config import load_config
    from board_outbox.service.runtime import Service

    async with open_side(side, request) as s:
        await s.stores.subs.put(Subscription(sub_id="s", tenant_id="healthy", bot="b"))
        await s.stores.cards.put(Card(tenant_id="healthy", card_id="ok", title="ok"))
        await s.pointer("board-reflect", _uniq("ghost"), {"active": "x"})
        config = load_config(env={}, tail={"poll_interval_seconds": 0.05, "seed": "earliest",
                                           "change_streams": False},
                             worker={"idle_seconds": 0.02})
        service = Service(s.stores, config, rng=random.Random(1))
        states: dict[str, int] = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            with anyio.fail_after(20):
                for _ in range(3):
                    seq = await s.stores.events.allocate_seq("healthy")
                    await s.stores.events.insert({"tenant_id": "healthy", "seq": seq,
                                                  "type": "card.created", "card_id": "ok",
                                                  "at": 1.0})
                while (states := await s.stores.outbox.count_by_state()).get("done", 0) < 6:
                    if states.get("failed"):
                        break
                    await anyio.sleep(0.02)
            service.stop()
        assert states == {"done": 6}  # 3 launches, 3 projection rows: none parked


# --- the rolling series of the console's charts (issue 33, item 6) ---------------------------

SERIES_CASES = {
    "minute-not-a-minute": ({"minute": -59}, "is not the start of a minute"),
    "minute-float": ({"minute": 0.0}, "is not the start of a minute"),
    "replica-empty": ({"replica": ""}, "is not a non-empty string"),
    "counts-string": ({"counts": "lots"}, "counts 'lots' is not a document"),
    "counts-negative": ({"counts": {"done": -5}}, "counts.done -5 is not a count"),
    "counts-decimal": ({"counts": {"materialized": Decimal128("1.5")}}, "is not a count"),
    "base-bool": ({"base": {"dead": True}}, "base.dead True is not a count"),
    "lag-object-tenant": ({"lag": [{"t": {"$gt": ""}, "n": 1}]}, "is not {t: tenant, n: count}"),
    "lag-huge-number": ({"lag": [{"t": "x", "n": 1e308}]}, "is not {t: tenant, n: count}"),
    "lag-10001-entries": ({"lag": [{"t": "x", "n": 1}] * 10_001}, "more than 10000"),
    "lag-total-string": ({"lag_total": "many"}, "lag_total 'many' is not a count"),
}


@pytest.mark.anyio
@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("case", sorted(SERIES_CASES))
async def test_a_bad_series_document_costs_only_itself_on_the_charts(
        side: str, case: str, caplog: pytest.LogCaptureFixture,
        request: pytest.FixtureRequest) -> None:
    """A planted or hand-edited ``trigger_series`` document: left out of the charts and the
    sparklines, one line, listed by ``status --json``; the good documents of the same minutes
    still draw (and a page loaded twice logs nothing more)."""
    from board_outbox.engine.upkeep.series import SeriesRecorder, SeriesSettings
    from board_outbox.model.bad_documents import BAD_DOCUMENTS
    from board_outbox.model.clock import ManualClock
    from board_outbox.model.series import MINUTE, SeriesCounts, minute_of
    from board_outbox.service.config import load_config
    from board_outbox.surface.console.trends import Trends

    patch, match = SERIES_CASES[case]
    clock = ManualClock(float(minute_of(ManualClock().now())) + 1)
    async with open_side(side, request) as s:
        rec = SeriesRecorder(s.stores.series, clock, "good", SeriesSettings(),
                             counts=lambda: SeriesCounts(materialized=4, done=3, dead=1),
                             lag=lambda: {"healthy": 6})
        m0 = rec.minute
        # counts of its own or not, the totals below are the good document's alone
        planted = {"minute": m0, "replica": "bad", "counts": {}, **patch}
        if isinstance(planted["minute"], (int, float)) and planted["minute"] != m0:
            planted["minute"] = m0 + planted["minute"]
        key = _uniq(f"series-{case}")
        if s.backend is not None:
            s.backend.series.put_raw(key, planted)
        else:
            await s.db["trigger_series"].insert_one({"_id": key, **planted})
        clock.advance(MINUTE)
        assert await rec.flush_due()
        caplog.set_level(logging.WARNING, logger="board_outbox")
        trends = Trends(s.stores, load_config(env={}), clock=lambda: clock.now() + 1)
        for _ in range(2):
            page = await trends.page(1)
            assert page.totals == {"materialized": 4, "done": 3, "dead": 1}
            assert page.tenants == ["healthy"] and len(page.charts) == 4
            sparks = await trends.sparklines(["healthy"])
            assert "<svg" in sparks["healthy"]
        lines = _lines(caplog)
        assert len(lines) == 1 and "trigger_series" in lines[0] and match in lines[0], lines
        assert any(d.collection == "trigger_series" and d.key == key and match in d.problem
                   for d in BAD_DOCUMENTS.current())


@pytest.mark.anyio
# mongomock applies a $max through a string as a silent no-op; the server (and the twin) refuse it
@pytest.mark.parametrize("side", [s for s in SIDES if s != "mongomock"])
async def test_a_bad_document_under_the_replicas_own_key_costs_one_minutes_point(
        side: str, caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest) -> None:
    """The worst place for one: the very (minute, replica) a flush writes, with counts that are
    not a document (the store refuses the $max). That flush fails with one line; its counts go
    with the next minute's, nothing lost, and the loop goes on."""
    from board_outbox.engine.upkeep.series import SeriesRecorder, SeriesSettings, read_window
    from board_outbox.model.clock import ManualClock
    from board_outbox.model.series import MINUTE, SeriesCounts, minute_of, series_id

    clock = ManualClock(float(minute_of(ManualClock().now())) + 1)
    counts = [SeriesCounts(materialized=5, done=5)]
    async with open_side(side, request) as s:
        replica = _uniq("r")
        rec = SeriesRecorder(s.stores.series, clock, replica, SeriesSettings(),
                             counts=lambda: counts[0], lag=dict)
        m0 = rec.minute
        doc = {"minute": m0, "replica": replica, "counts": "lots"}
        if s.backend is not None:
            s.backend.series.put_raw(series_id(m0, replica), doc)
        else:
            await s.db["trigger_series"].insert_one({"_id": series_id(m0, replica), **doc})
        caplog.set_level(logging.WARNING, logger="board_outbox")
        clock.advance(MINUTE)
        assert not await rec.flush_due()  # refused by the store: one line
        counts[0] = SeriesCounts(materialized=8, done=7)
        clock.advance(MINUTE)
        assert await rec.flush_due()
        window = await read_window(s.stores.series, clock.now(), 2)
        assert sum(window.counts("materialized")) == 8 and sum(window.counts("done")) == 7
        lines = _lines(caplog)
        assert len(lines) == 2, lines  # the refused flush, and the document left out on reading
        assert "series flush of minute" in lines[0] and "trigger_series" in lines[1]


@pytest.mark.anyio
@pytest.mark.parametrize("side", ["memory", "mongomock"])
@pytest.mark.parametrize("kind", ["string", "list", "no-data"])
async def test_a_stored_token_that_cannot_be_one_loads_as_none(
        side: str, kind: str, caplog: pytest.LogCaptureFixture,
        request: pytest.FixtureRequest) -> None:
    from board_outbox.model.bad_documents import BAD_DOCUMENTS

    u = _uniq("garbage")  # a distinct problem: the once-per-problem lines are per process
    token = {"string": u, "list": ["x", u], "no-data": {"no_data": u}}[kind]
    async with open_side(side, request) as s:
        await s.token(token)
        caplog.set_level(logging.WARNING, logger="board_outbox")
        before = BAD_DOCUMENTS.counts.get("board_outbox_state", 0)
        for _ in range(3):
            assert await s.stores.tokens.load() is None
        lines = _lines(caplog)  # one line per distinct problem, however often it is loaded
        assert len(lines) == 1 and "board_outbox_state" in lines[0], lines
        assert BAD_DOCUMENTS.counts.get("board_outbox_state", 0) == before + 1
        assert any(d.collection == "board_outbox_state" for d in BAD_DOCUMENTS.current())


@pytest.mark.anyio
@pytest.mark.parametrize("side", [s for s in SIDES if s != "memory"])
@pytest.mark.parametrize("data", ["82ABCDEF", b"\x82\xab\xcd\xef", Binary(b"\x82\xab\xcd\xef", 0)],
                         ids=["string", "bytes", "binary"])
async def test_a_stored_token_with_string_or_binary_data_loads_as_it_is(
        side: str, data: object, request: pytest.FixtureRequest) -> None:
    """A resume token's ``_data`` is a string on today's servers and binary on older ones (and
    on some wire servers): both are tokens, loaded unchanged, never listed as bad."""
    from board_outbox.model.bad_documents import BAD_DOCUMENTS

    async with open_side(side, request) as s:
        await s.token({"_data": data, "_typeBits": Binary(b"\x01", 0)})
        got = await s.stores.tokens.load()
        assert isinstance(got, dict) and set(got) == {"_data", "_typeBits"}, got
        assert got["_data"] == data or bytes(got["_data"]) == bytes(data)  # type: ignore[call-overload]
        assert not any(d.collection == "board_outbox_state" and d.key.endswith("board_events")
                       and repr(data)[:20] in d.problem for d in BAD_DOCUMENTS.current())


async def _other_collections_token(db: Any) -> Any:
    """A token of another database's stream: the service's one stream watches its own database
    (S6), where any collection's token is a position it can resume from."""
    other = db.client[f"{db.name}_elsewhere"]
    stream = await other["elsewhere"].watch()
    try:
        async with stream:
            await other["elsewhere"].insert_one({"x": 1})
            while await stream.try_next() is None:
                pass
            return stream.resume_token
    finally:
        await db.client.drop_database(other.name)


@pytest.mark.anyio
@pytest.mark.live_mongo
@pytest.mark.parametrize("kind", ["garbage-data", "other-collection", "string"])
async def test_a_refused_resume_token_is_dropped_and_the_stream_reopens_on_the_wire(
        kind: str, live_db: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Item 3: a stored token the server refuses kept the change stream closed forever (an
    ERROR every few seconds, /readyz ready). Now: a bounded number of attempts, one line, the
    token dropped, the stream reopened; meanwhile /readyz and board_outbox_poll_only say the
    service runs on the poll net alone. Polling is 60 s apart here: only the reopened stream
    (and the full poll on reopening) can launch the events in time."""
    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo import mongo_stores
    from board_outbox.service.config import load_config
    from board_outbox.service.runtime import Service
    from board_outbox.service.waker import MAX_TOKEN_REFUSALS
    from board_outbox.surface.http.checks import readiness

    token: object = {"other-collection": None, "garbage-data": {"_data": "garbage"},
                     "string": "stringtoken"}[kind]
    if kind == "other-collection":
        token = await _other_collections_token(live_db)
    stores = mongo_stores(live_db, MemoryLauncher())
    await stores.subs.put(Subscription(sub_id="s", tenant_id="t", bot="b"))
    await stores.cards.put(Card(tenant_id="t", card_id="ok", title="ok"))
    await live_db["board_outbox_state"].insert_one({"_id": "resume_token:board_events",
                                                    "token": token})
    config = load_config(env={}, projections=[], tail={"poll_interval_seconds": 60,
                                                       "seed": "earliest"},
                         worker={"idle_seconds": 0.05})
    service = Service(stores, config, rng=random.Random(1))
    caplog.set_level(logging.WARNING, logger="board_outbox")
    launcher = stores.launcher
    assert isinstance(launcher, MemoryLauncher)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        with anyio.fail_after(30):
            while not service.loops.get("waker"):
                await anyio.sleep(0.01)
            assert service.poll_only  # not open yet
            while not service.stream_open:
                await anyio.sleep(0.02)
            failing, _ = await readiness(service)
            assert "stream" not in failing
            for i in range(1, 4):
                seq = await stores.events.allocate_seq("t")
                await stores.events.insert({"tenant_id": "t", "seq": seq, "type": "card.created",
                                            "card_id": "ok", "at": 1.0})
                while sum(1 for r in launcher.launches if r.tenant_id == "t") < i:
                    await anyio.sleep(0.02)
        assert service.stats.stream_wakes >= 1
        service.stop()
    lines = _lines(caplog)
    if kind == "string":  # not a token at all: the store drops it on load, one line
        assert service.stats.tokens_dropped == 0
        assert len(lines) == 1 and "board_outbox_state" in lines[0], lines
    else:  # the server refuses it: MAX_TOKEN_REFUSALS attempts, then dropped
        assert service.stats.tokens_dropped == 1
        refused = [m for m in lines if "change stream failed" in m]
        dropped = [m for m in lines if f"resume token refused {MAX_TOKEN_REFUSALS} times" in m]
        assert len(refused) == 1 and len(dropped) == 1, lines
        assert len(lines) == 2, lines
    doc = await live_db["board_outbox_state"].find_one({"_id": "resume_token:board_events"})
    assert doc is None or doc["token"] != token


@pytest.mark.anyio
async def test_poll_only_shows_in_readyz_and_metrics() -> None:
    """A stream that cannot open: /readyz names it once the wake allowance has passed, and
    board_outbox_poll_only is 1; events still flow on the poll net."""
    from prometheus_client.parser import text_string_to_metric_families

    from board_outbox.model.clock import ManualClock
    from board_outbox.service.config import load_config
    from board_outbox.service.runtime import Service
    from board_outbox.surface.http.checks import degraded, readiness
    from board_outbox.surface.http.metrics import ServiceCollector

    b = MemoryBackend()

    async def refusing(token: Any, **kw: Any) -> Any:
        raise ValueError("the feed refuses to open")
        yield  # an async generator

    b.events.watch = refusing  # type: ignore[method-assign,assignment]
    clock = ManualClock()
    config = load_config(env={}, projections=[], tail={"poll_interval_seconds": 0.05})
    service = Service(b.stores(), config, clock=clock, rng=random.Random(1))
    service.metrics.prom.registry.register(ServiceCollector(service))
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        with anyio.fail_after(5):
            while service.stats.stream_reopens < 2:
                await anyio.sleep(0.01)
        clock.advance(60)
        failing, _ = await readiness(service)
        assert "stream" not in failing  # events flow on the poll net: still ready
        assert "running on the poll net alone" in degraded(service)["stream"]
        assert "the feed refuses to open" in degraded(service)["stream"]
        from prometheus_client import generate_latest

        fam = {f.name: f for f in text_string_to_metric_families(
            generate_latest(service.metrics.prom.registry).decode())}
        assert fam["board_outbox_poll_only"].samples[0].value == 1.0
        service.stop()


@pytest.mark.anyio
@pytest.mark.parametrize("side", SIDES)
async def test_a_bad_counter_or_cursor_costs_only_its_tenants_status(
        side: str, request: pytest.FixtureRequest) -> None:
    """Item 1: one malformed counter or cursor blanked /metrics per-tenant gauges, stall
    detection and `status` for every tenant (the per-tenant read raised). Now the others
    stand and the bad tenant carries a ``problems`` entry."""
    from board_outbox.service.health import tenant_statuses

    async with open_side(side, request) as s:
        for t in ("healthy", "c1", "k1"):
            await s.stores.subs.put(Subscription(sub_id=f"{t}-s", tenant_id=t, bot="b"))
        c1, k1 = _uniq("c1"), _uniq("k1")
        for t in (c1, k1):
            await s.stores.subs.put(Subscription(sub_id=f"{t}-s", tenant_id=t, bot="b"))
        for _ in range(2):
            await s.stores.events.allocate_seq("healthy")
        await s.stores.events.allocate_seq(c1)
        await s.cursor(c1, "abc")
        await s.counter(k1, "lots")
        st = await tenant_statuses(s.stores, 1000.0)
        assert (st["healthy"].allocated_seq, st["healthy"].lag_events) == (2, 2)
        assert st["healthy"].problems == []
        assert "'abc' is not an integer seq" in st[c1].problems[0]
        assert "'lots' is not an integer seq" in st[k1].problems[0]


@pytest.mark.anyio
@pytest.mark.timeout(60)
@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize(("value", "match"), [
    ("yesterday", "epoch at 'yesterday' is not a number of seconds"),
    (1.7e12, "a millisecond timestamp?"),
    (True, "epoch at True is not a number of seconds"),
])
async def test_a_malformed_epoch_costs_one_line_and_this_replicas_start_stands_in(
        side: str, value: object, match: str, caplog: pytest.LogCaptureFixture,
        request: pytest.FixtureRequest) -> None:
    """The store-wide epoch (``trigger_cursors`` ``~epoch``), hand-edited or written by another
    tool: read per document, one warning, and the replica's own start stands in (history before
    it stays unlaunched, a tenant born after it is read in full); the document is left alone, no
    reader of cursors takes it for a tenant's, and ``status`` lists it as a bad document."""
    from board_outbox.model.bad_documents import BAD_DOCUMENTS
    from board_outbox.model.clock import ManualClock
    from board_outbox.model.epoch import EPOCH_KEY
    from board_outbox.service.health import tenant_statuses

    BAD_DOCUMENTS.resolved("trigger_cursors", EPOCH_KEY)  # another case's: logged once per process
    async with open_side(side, request) as s:
        if s.backend is not None:
            s.backend.cursors.stored_epoch = value
        else:
            await s.db["trigger_cursors"].insert_one({"_id": EPOCH_KEY, "at": value})
        st = s.stores
        old, new = _uniq("old"), _uniq("new")
        clock = ManualClock(2_000_000_000.0)
        for t in (old, new):
            await st.subs.put(Subscription(sub_id=f"{t}-s", tenant_id=t, bot="b"))
            await st.cards.put(Card(tenant_id=t, card_id="ok", title="ok"))
        for _ in range(2):  # history, before this replica starts
            seq = await st.events.allocate_seq(old)
            await st.events.insert({"tenant_id": old, "seq": seq, "type": "card.created",
                                    "card_id": "ok", "at": clock.now() - 60})
        tail = Tail(events=st.events, cursors=st.cursors, outbox=st.outbox, subs=st.subs,
                    cards=st.cards, clock=clock)  # seed "latest", the default
        with caplog.at_level(logging.WARNING):
            assert await tail.begin() == clock.now()
            again = Tail(events=st.events, cursors=st.cursors, outbox=st.outbox, subs=st.subs,
                         cards=st.cards, clock=ManualClock(2_000_000_100.0))
            assert await again.begin() == 2_000_000_100.0  # each replica its own start
        lines = [m for m in _lines(caplog) if EPOCH_KEY in m]
        assert len(lines) == 1 and match in lines[0] and "\n" not in lines[0], _lines(caplog)
        clock.advance(5.0)
        seq = await st.events.allocate_seq(new)  # born after this replica's start
        await st.events.insert({"tenant_id": new, "seq": seq, "type": "card.created",
                                "card_id": "ok", "at": clock.now()})
        assert (await tail.cursor(old), await tail.cursor(new)) == (2, 0)
        await tail.drain_all([old, new])
        assert [r.seq for r in await st.outbox.find(RowFilter(tenant_id=new))] == [1]
        assert [r.seq for r in await st.outbox.find(RowFilter(tenant_id=old))] == []
        assert EPOCH_KEY not in await st.cursors.all()
        assert [d.key for d in BAD_DOCUMENTS.current() if d.collection == "trigger_cursors"
                and match in d.problem] == [EPOCH_KEY]  # what status --json lists
        statuses = await tenant_statuses(st, clock.now())
        assert EPOCH_KEY not in statuses and statuses[new].problems == []
        if s.db is not None:  # left as it was: an operator's to fix
            assert (await s.db["trigger_cursors"].find_one({"_id": EPOCH_KEY}))["at"] == value


@pytest.mark.anyio
async def test_refresh_status_survives_a_bad_cursor() -> None:
    from board_outbox.service.config import load_config
    from board_outbox.service.runtime import Service

    b = MemoryBackend()
    for t in ("healthy", "c1"):
        await b.subs.put(Subscription(sub_id=f"{t}-s", tenant_id=t, bot="b"))
        await b.events.emit(t, "card.created", "ok")
    b.cursors._cursors["c1"] = "abc"  # type: ignore[assignment]
    service = Service(b.stores(), load_config(env={}, projections=[]), rng=random.Random(1))
    await service.refresh_gauges()
    service.status_enabled = True
    await service.refresh_status()
    assert service.status["healthy"].lag_events == 1 and service.status["c1"].problems


@pytest.mark.anyio
@pytest.mark.parametrize("side", SIDES)
async def test_a_cursor_ahead_of_its_counter_holds_the_tenant_until_reset(
        side: str, caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Item 2: a cursor ahead of its tenant's counter (restored or hand-edited) made the tail
    skip the events numbered up to it, with no line, /readyz ready and `status` lag 0. Now the
    tenant is held (one line, status and /readyz say so) and `cursor reset` releases it: every
    event launches, none is skipped."""
    from board_outbox.model.clock import ManualClock
    from board_outbox.service.config import load_config
    from board_outbox.service.health import tenant_statuses
    from board_outbox.service.runtime import Service
    from board_outbox.surface.http.checks import degraded, readiness

    async with open_side(side, request) as s:
        t = _uniq("ahead")
        for x in ("healthy", t):
            await s.stores.subs.put(Subscription(sub_id=f"{x}-s", tenant_id=x, bot="b"))
            await s.stores.cards.put(Card(tenant_id=x, card_id="ok", title="ok"))
        clock = ManualClock()
        config = load_config(env={}, projections=[], tail={"seed": "earliest"})
        service = Service(s.stores, config, clock=clock, rng=random.Random(1))

        async def emit(x: str) -> None:
            seq = await s.stores.events.allocate_seq(x)
            await s.stores.events.insert({"tenant_id": x, "seq": seq, "type": "card.created",
                                          "card_id": "ok", "at": clock.now()})

        async def one_pass() -> None:
            await emit("healthy")
            await service.tail.drain_all(await service.tail.behind())
            await service.worker.tick_any()

        await emit(t)
        await one_pass()
        assert s.launched(t) == 1
        await s.cursor(t, 5)  # a restored cursor: 5, the counter is at 1
        caplog.set_level(logging.WARNING, logger="board_outbox")
        for _ in range(7):  # seqs 2..8: without the hold, 2..5 would be skipped
            await emit(t)
            await one_pass()
        assert s.launched(t) == 1 and s.launched("healthy") == 8
        assert service.tail.cursor_ahead == {t: (5, 2)}  # seen at the first pass after
        lines = _lines(caplog)
        assert len(lines) == 1 and "cursor ahead of its counter" in lines[0], lines
        failing, _ = await readiness(service)
        assert "cursor" not in failing and t in degraded(service)["cursor"]
        st = await tenant_statuses(s.stores, clock.now())
        assert st[t].problems == [f"cursor 5 is ahead of the counter (2): held until "
                                  f"`board-outbox cursor reset --tenant {t} --to N`"]

        @asynccontextmanager
        async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
            yield s.stores

        from board_outbox.surface.cli.commands.cursor import cmd_cursor
        from board_outbox.surface.cli.output import UsageError
        from board_outbox.surface.cli.parser import build_parser

        def args(*a: str) -> Any:
            return build_parser().parse_args(["cursor", *a])

        assert await cmd_cursor(args("show", "--tenant", t), factory) == 0
        assert "HELD: found ahead of the counter (cursor 5, counter 2)" in capsys.readouterr().out
        # a restarted replica (a fresh tail) still holds it, though the counter has caught up
        fresh = Service(s.stores, config, clock=clock, rng=random.Random(1))
        assert await fresh.tail.behind() == ["healthy"] or t not in await fresh.tail.behind()
        assert fresh.tail.cursor_ahead == {t: (5, 2)}
        with pytest.raises(UsageError, match="would be skipped"):
            await cmd_cursor(args("reset", "--tenant", t, "--to", "99"), factory)
        assert await cmd_cursor(args("reset", "--tenant", t, "--to", "1"), factory) == 0
        await one_pass()
        assert service.tail.cursor_ahead == {}
        assert s.launched(t) == 8  # seqs 2..8, none skipped
        assert sorted(r.seq for r in s.stores.launcher.launches if r.tenant_id == t) == list(
            range(1, 9))


def test_cursor_reset_beyond_the_counter_is_one_line_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    b = MemoryBackend()
    anyio.run(b.events.emit, "t", "card.created", "ok")

    @asynccontextmanager
    async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
        yield b.stores()

    assert main(["cursor", "reset", "--tenant", "t", "--to", "5"], factory=factory) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "events 2..5 would be skipped" in err
    assert main(["cursor", "reset", "--tenant", "a/b", "--to", "0"], factory=factory) == 2
    assert main(["cursor", "reset", "--tenant", "t", "--to", "1"], factory=factory) == 0
    assert b.cursors._cursors["t"] == 1


@pytest.mark.anyio
async def test_status_shows_a_cursor_ahead() -> None:
    from board_outbox.service.health import tenant_statuses

    b = MemoryBackend()
    await b.events.emit("t", "card.created", "ok")
    b.cursors._cursors["t"] = 9
    st = await tenant_statuses(b.stores(), 100.0)
    assert "cursor 9 is ahead of the counter (1)" in st["t"].problems[0]
    assert st["t"].lag_events == 0


class _Counting:
    """Counts the calls made through a port (one call = one query or bulk write)."""

    def __init__(self, inner: Any, calls: dict[str, int], name: str) -> None:
        self._inner, self._calls, self._name = inner, calls, name

    def __getattr__(self, attr: str) -> Any:
        fn = getattr(self._inner, attr)
        if not callable(fn):
            return fn

        def call(*a: Any, **k: Any) -> Any:
            key = f"{self._name}.{attr}"
            self._calls[key] = self._calls.get(key, 0) + 1
            return fn(*a, **k)
        return call


def _counted(stores: Any, calls: dict[str, int]) -> Any:
    from dataclasses import replace

    return replace(stores, **{f: _Counting(getattr(stores, f), calls, f)
                              for f in ("events", "cursors", "outbox", "subs", "status")})


@pytest.mark.anyio
@pytest.mark.parametrize("side", ["memory", "mongomock"])
async def test_many_new_tenants_are_seeded_in_one_write_not_one_by_one(
        side: str, request: pytest.FixtureRequest) -> None:
    """Item 7: 2,000 counters at seq 0 with no cursor (new, idle tenants) all looked behind, and
    the first poll pass seeded them one by one (four round trips each) before a live tenant's
    event. Now one bulk write seeds them and the pass drains the live tenant alone."""
    from board_outbox.model.clock import ManualClock
    from board_outbox.service.config import load_config
    from board_outbox.service.runtime import Service

    async with open_side(side, request) as s:
        await s.stores.subs.put(Subscription(sub_id="s", tenant_id="live", bot="b"))
        await s.stores.cards.put(Card(tenant_id="live", card_id="ok", title="ok"))
        for i in range(2000):
            await s.counter(f"idle{i:05}", 0)
        seq = await s.stores.events.allocate_seq("live")
        await s.stores.events.insert({"tenant_id": "live", "seq": seq, "type": "card.created",
                                      "card_id": "ok", "at": 1.0})
        calls: dict[str, int] = {}
        stores = _counted(s.stores, calls)
        service = Service(stores, load_config(env={}, tail={"seed": "earliest"}),
                          clock=ManualClock(), rng=random.Random(1))
        behind = await service.tail.behind()
        assert behind == ["live"]
        results = await service.tail.drain_all(behind)
        assert [r.tenant_id for r in results] == ["live"] and results[0].cursor_after == 1
        assert calls.get("cursors.seed_many") == 1 and calls.get("cursors.seed", 0) <= 1
        assert await s.stores.cursors.get("idle01999") == 0  # seeded: the next event is read
        calls.clear()
        assert await service.tail.behind() == []  # the next pass: nothing to seed, nothing behind
        assert "cursors.seed_many" not in calls


@pytest.mark.timeout(180)  # heavy: tens of seconds on a loaded machine (default 90 s)
@pytest.mark.anyio
@pytest.mark.parametrize("side", ["memory", "mongomock"])
async def test_status_costs_the_same_queries_for_10_or_1000_tenants(
        side: str, request: pytest.FixtureRequest) -> None:
    """Item 7: the per-tenant status refresh cost several reads per tenant per interval."""
    from board_outbox.service.health import tenant_statuses

    async with open_side(side, request) as s:
        cost: list[int] = []
        for n in (10, 1000):
            for i in range(len(cost) * 10, n):  # add tenants up to n, each one event behind
                t = f"t{i:05}"
                await s.stores.subs.put(Subscription(sub_id=f"{t}-s", tenant_id=t, bot="b"))
                seq = await s.stores.events.allocate_seq(t)
                await s.stores.events.insert({"tenant_id": t, "seq": seq, "type": "x",
                                              "card_id": "c", "at": 1.0})
            calls: dict[str, int] = {}
            st = await tenant_statuses(_counted(s.stores, calls), 100.0)
            assert len(st) == n and all(x.lag_seconds == 99.0 for x in st.values())
            cost.append(sum(calls.values()))
        assert cost[0] == cost[1] <= 8, cost


# --- issue 33: explain, over hostile rows, keys and the documents it reads -------------------
#
# ``explain ROW_KEY`` reads one row and, to name what holds it, the limit slots and counters, the
# membership leases and the event: each document is parsed on its own, and a bad one costs only
# what it would have said -- never the explanation, never a traceback.


async def _raw_row(s: Side, doc: dict[str, Any]) -> None:
    if s.backend is not None:
        s.backend.outbox.insert_raw(doc)
    else:
        await s.db["trigger_effects"].insert_one(dict(doc))


async def _raw_slot(s: Side, doc_id: str, doc: dict[str, Any]) -> None:
    if s.backend is not None:
        s.backend.limits.put_raw(doc_id, doc)
    else:
        await s.db["board_outbox_limits"].replace_one({"_id": doc_id}, dict(doc), upsert=True)


async def _raw_event(s: Side, doc: dict[str, Any]) -> None:
    if s.backend is not None:
        s.backend.events.insert_now(doc)
    else:
        await s.db["board_events"].insert_one(dict(doc))


def _pending(tenant: str, seq: int, now: float, **fields: Any) -> dict[str, Any]:
    return {"tenant_id": tenant, "row_key": f"{tenant}/{seq}/sub/s", "seq": seq,
            "kind": "launch", "sub_id": "s", "state": "pending", "not_before": now,
            "created_at": now, "updated_at": now, **fields}


BAD_ROWS: dict[str, dict[str, Any]] = {
    "attempts-string": {"attempts": "many"},
    "errors-string": {"state": "failed", "errors": "boom"},
    "not-before-string": {"not_before": "soon"},
    "state-weird": {"state": "weird"},
    "event-string": {"event": "e"},
    "lease-until-list": {"state": "claimed", "lease_until": [1]},
    "waiting-number": {"waiting": 5},
    "audit-entry-without-at": {"audit": [{"action": "replay"}]},
}


@pytest.mark.anyio
@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("case", sorted(BAD_ROWS))
async def test_explain_names_a_malformed_row_and_the_one_beside_it_as_ever(
        side: str, case: str, request: pytest.FixtureRequest) -> None:
    from board_outbox.engine.upkeep.explain import explain
    from board_outbox.model.explanation import Malformed

    t = _uniq("ex")
    async with open_side(side, request) as s:
        now = 1_000_000.0
        await _raw_row(s, _pending(t, 1, now, **BAD_ROWS[case]))
        await _raw_row(s, _pending(t, 2, now))
        x = await explain(s.stores, f"{t}/1/sub/s", now + 1)
        [h] = x.holds
        assert isinstance(h, Malformed) and x.row is None and "malformed effect row" in h.problem
        good = await explain(s.stores, f"{t}/2/sub/s", now + 1)
        assert good.row is not None and good.holds[-1].name == "turn"


@pytest.mark.anyio
@pytest.mark.parametrize("side", SIDES)
async def test_explain_of_a_key_no_row_has_or_that_is_no_key(
        side: str, request: pytest.FixtureRequest) -> None:
    from board_outbox.engine.upkeep.explain import explain
    from board_outbox.model.errors import InvalidRowKey, RowNotFound

    async with open_side(side, request) as s:
        with pytest.raises(RowNotFound, match="no row 'nobody/1/sub/s'"):
            await explain(s.stores, "nobody/1/sub/s", 1.0)
        for text in ("", "nobody", "a/1/sub/{'$ne': 1}", "a/1/sub/s\x00", "a/-1/sub/s",
                     "a/1/proj/" + "p" * 201, "/1/sub/s", "a//sub/s"):
            with pytest.raises(InvalidRowKey, match="is not a row key"):
                await explain(s.stores, text, 1.0)


@pytest.mark.anyio
@pytest.mark.parametrize("side", SIDES)
async def test_explain_reads_past_bad_slots_counters_leases_and_events(
        side: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture) -> None:
    """The documents explain reads to name a hold, each parsed alone: a slot whose holder is not
    a string, whose until is not a time or is a month ahead (a ghost, taken over by the next
    acquire) holds nothing; a counter that is not a count reads as full (its window stays shut,
    as ``take`` treats it); a lease that is not a time names no owner; an event whose at is not a
    time leaves its moment undated. The good documents beside them still count."""
    from board_outbox.engine.flow.limits import LimitSettings
    from board_outbox.engine.upkeep.explain import ExplainSettings, explain
    from board_outbox.model.explanation import Limit, Ownership

    t = _uniq("ex")
    now = 1_000_000.0
    key = bot_key(t, "b")
    async with open_side(side, request) as s:
        await s.stores.subs.put(Subscription(sub_id="s", tenant_id=t, bot="b", max_in_flight=5,
                                             max_per_second=1.0))
        await _raw_event(s, {"tenant_id": t, "seq": 1, "type": "card.created", "card_id": "c",
                             "at": "yesterday"})
        await _raw_row(s, _pending(t, 1, now, waiting=f"bot limit (in_flight) of {key}"))
        for k, doc in enumerate([{"holder": f"{t}/9/sub/s:c9", "until": now + 60},
                                 {"holder": 5, "until": now + 60},
                                 {"holder": "x:soon", "until": "soon"},
                                 {"holder": "ghost:c", "until": now + 40 * 86400},
                                 {"holder": "gone:c", "until": now - 1}]):
            await _raw_slot(s, slot_id(key, k), {"key": key, **doc})
        await _raw_slot(s, rate_slot(key, 1.0, now + 1)[0], {"n": -5})
        await s.member("ok-member", now + 5)
        await s.member(_uniq("bad-member"), "soon")
        caplog.set_level(logging.WARNING, logger="board_outbox")
        x = await explain(s.stores, f"{t}/1/sub/s", now + 1, ExplainSettings(limits=LimitSettings()))
        flight, rate = x.holds[0], x.holds[1]
        assert isinstance(flight, Limit) and isinstance(rate, Limit)
        assert [h.holder for h in flight.holders] == [f"{t}/9/sub/s:c9"]
        assert (flight.used, flight.full) == (1, False)
        assert (rate.kind, rate.used, rate.full) == ("per_second", None, True)
        own = next(h for h in x.holds if isinstance(h, Ownership))
        assert (own.owner, own.replicas) == ("ok-member", 1)
        assert x.timeline[0].what == "event" and x.timeline[0].at is None
        assert any("is not a time" in n for n in x.notes)
        # the unparseable waiting text: a note, not a crash
        await _raw_row(s, _pending(t, 2, now, waiting="over some limit"))
        y = await explain(s.stores, f"{t}/2/sub/s", now + 1)
        assert any("names no limit" in n for n in y.notes)


# --- times out of range at every page and command (R7) --------------------------------------
#
# The stored times a JavaScript writer, an overflow or a sign slip leave: a pause at 1e12 (its
# milliseconds), dead-letters parked at +inf, -inf, 1e20 and -1e308, a row materialized at -1e15,
# an error dated 1e12. Each used to end a command in a traceback ("year 33658 is out of range",
# "timestamp out of range for platform time_t") and answer 500 on every console page that listed
# it; each now costs only its own document, which every listing names with why.

R7_ROWS: dict[int, dict[str, Any]] = {
    2: {"updated_at": float("inf")}, 3: {"updated_at": float("-inf")}, 4: {"updated_at": 1e20},
    5: {"updated_at": -1e308},
    6: {"state": "pending", "created_at": -1e15},
    7: {"state": "pending", "errors": [{"attempt": 1, "at": 1e12, "error": "x", "kind": "error"}]},
}
R7_WHY = {2: "updated_at inf is out of range", 3: "updated_at -inf is out of range",
          4: "updated_at 1e+20 is out of range", 5: "updated_at -1e+308 is out of range",
          6: "created_at -1000000000000000.0 is out of range",
          7: "errors[0].at 1000000000000.0 is out of range"}
R7_PAGES = ["/", "/pauses", "/tenants/{t}", "/dead-letters?tenant={t}",
            "/dead-letters/plan?tenant={t}", *[f"/rows/{{t}}/{seq}/sub/s" for seq in range(1, 8)]]


async def _r7_plant(s: Side, t: str, now: float) -> None:
    await s.stores.subs.put(Subscription(sub_id="s", tenant_id=t, bot="b"))
    bad = {"scope": "tenant", "key": t, "active": True, "reason": "js", "by": "js", "at": 1e12}
    if s.backend is not None:
        s.backend.pauses.put_raw(f"tenant:{t}", bad)
    else:
        await s.db["board_outbox_pauses"].insert_one({"_id": f"tenant:{t}", **bad})
    assert s.stores.pauses is not None
    await s.stores.pauses.pause("bot", f"{t}-bot", reason="fine", by="ana", at=now - 60)
    for seq in range(1, 8):
        await _raw_row(s, {"tenant_id": t, "row_key": f"{t}/{seq}/sub/s", "seq": seq,
                           "kind": "launch", "sub_id": "s", "state": "failed", "attempts": 3,
                           "not_before": now - 100, "created_at": now - 100,
                           "updated_at": now - 50 + seq, "materialized_at": now - 100,
                           "errors": [{"attempt": 3, "at": now - 50, "error": "LaunchFailed: 503",
                                       "kind": "error"}], **R7_ROWS.get(seq, {})})


@pytest.mark.anyio
@pytest.mark.parametrize("side", SIDES)
async def test_times_out_of_range_cost_only_their_documents_on_every_page_and_command(
        side: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """R7, on every backend: ``paused``, ``dead-letters list``, ``dead-letters replay --filter
    ... --dry-run`` and ``explain`` exit 0 without a traceback, and the console's overview,
    pauses, tenant, dead-letters, plan and row pages answer 200, each naming the documents it
    left out and why; the good pause and the good dead-letter beside them are shown as ever.
    The CLI runs through ``main`` (on the wire: its own client, from a configuration file)."""
    import time

    import httpx

    from board_outbox.model.bad_documents import BAD_DOCUMENTS
    from board_outbox.service.config import load_config
    from board_outbox.service.health import tenant_status
    from board_outbox.surface.console import build_console

    t, now = _uniq("r7"), time.time()
    keys = {seq: f"{t}/{seq}/sub/s" for seq in range(1, 8)}
    async with open_side(side, request) as s:
        await _r7_plant(s, t, now)
        if s.db is not None and side == "mongo-live":
            conf = tmp_path / "bo.toml"
            conf.write_text(f'[store]\nbackend = "mongo"\nuri = "{request.getfixturevalue("live_uri")}"\n'
                            f'database = "{s.db.name}"\n')
            extra, factory = ["--config", str(conf)], None
        else:
            @asynccontextmanager
            async def opened(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
                yield s.stores

            extra, factory = [], opened

        async def cli(*args: str) -> tuple[int, str, str]:
            code = await anyio.to_thread.run_sync(lambda: main([*args, *extra], factory=factory))
            out, err = capsys.readouterr()
            assert "Traceback" not in out + err, (args, err)
            return code, out, err

        code, out, err = await cli("paused")
        assert code == 0 and f"{t}-bot" in out and "1 pause on" in out
        assert f"malformed pause document tenant:{t}: at 1000000000000.0 is out of range" in err
        code, out, _ = await cli("dead-letters", "list", "--tenant", t)
        assert code == 0 and keys[1] in out and "1 dead-letters" in out
        assert "4 more matching rows do not decode" in out
        for seq in (2, 3, 4, 5):
            assert f"  {keys[seq]}: {R7_WHY[seq]}" in out
        code, out, _ = await cli("dead-letters", "replay", "--filter", f"tenant={t}", "--dry-run")
        assert code == 0 and "plan: 1 dead-letter match" in out
        assert "4 matching documents do not decode and are left alone" in out
        for seq in (2, 5, 6, 7):
            code, out, _ = await cli("explain", keys[seq])
            assert code == 0 and "malformed" in out and R7_WHY[seq] in out, out

        app = build_console(s.stores, load_config(env={}))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://127.0.0.1") as client:
            pages = {p: await client.get(p.format(t=t)) for p in R7_PAGES}
        assert {p: r.status_code for p, r in pages.items()} == dict.fromkeys(R7_PAGES, 200)
        assert "Malformed pause document" in pages["/pauses"].text
        assert "out of range" in pages["/pauses"].text and f"{t}-bot" in pages["/"].text
        listing = pages["/dead-letters?tenant={t}"].text
        assert 'id="unreadable"' in listing and keys[1] in listing
        assert all(keys[seq] in listing for seq in (2, 3, 4, 5))
        tenant = pages["/tenants/{t}"].text
        assert 'id="unreadable"' in tenant and all(keys[seq] in tenant for seq in R7_ROWS)
        plan = pages["/dead-letters/plan?tenant={t}"].text
        assert 'id="matched">1<' in plan and "match but do not decode: left alone" in plan
        assert all(keys[seq] in plan for seq in (2, 3, 4, 5))
        for seq in range(2, 8):
            row = pages[f"/rows/{{t}}/{seq}/sub/s"].text
            assert 'data-hold="malformed"' in row and R7_WHY[seq] in row, seq
        # the tenant's oldest live row is row 7 (materialized 100 s ago), not row 6 at -1e15
        st = await tenant_status(s.stores, t, now)
        assert st.oldest_pending_age_seconds == pytest.approx(100.0)
        if s.stores.status is not None:
            summary = (await s.stores.status.row_summary([t], ["pending"]))[t]
            assert summary.oldest_live_created_at == pytest.approx(now - 100)
    BAD_DOCUMENTS.resolved("board_outbox_pauses", f"tenant:{t}")


# --- subscriptions the operators manage (P6) -----------------------------------------------------

# stored subscription documents the service cannot read: each listed by `subscriptions list` as
# a named bad document (never a traceback), refused by `edit`, removable by `rm`
BAD_SUBS: dict[str, dict[str, Any]] = {
    "priority-99": {"bot": "b", "priority": 99},
    "bot-a-number": {"bot": 7},
    "rule-a-string": {"bot": "b", "rule": "card.moved"},
    "kind-projection": {"bot": "b", "kind": "projection"},
    "coalesce-backwards": {"bot": "b", "coalesce": {"quiet_seconds": 60, "max_wait_seconds": 5}},
    "no-bot": {},
}


# the memory twin holds decoded subscriptions: only those its own checks refuse can be planted
_SUB_PARAMS = [pytest.param(c, "memory", id=f"{c}-memory")
               for c in ("kind-projection", "priority-99")]
_SUB_PARAMS += [pytest.param(c, "mongomock", id=f"{c}-mongomock") for c in sorted(BAD_SUBS)]
_SUB_PARAMS += [pytest.param(c, "mongo-live", id=f"{c}-mongo-live", marks=pytest.mark.live_mongo)
                for c in sorted(BAD_SUBS)]


@pytest.mark.anyio
@pytest.mark.parametrize(("case", "side"), _SUB_PARAMS)
async def test_a_stored_subscription_that_does_not_decode_is_named_by_the_subscriptions_command(
        side: str, case: str, request: pytest.FixtureRequest,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import json

    from board_outbox.surface.subscribing import record

    t = _uniq("subs")
    bad_id = f"{t}-bad"
    async with open_side(side, request) as s:
        doc = {"_id": bad_id, "sub_id": bad_id, "tenant_id": t, **BAD_SUBS[case]}
        if s.backend is not None:
            bad = Subscription(**{k: v for k, v in doc.items() if k != "_id"})
            s.backend.subs._subs[bad_id] = bad
            s.backend.subs._by_tenant.setdefault(t, {})[bad_id] = bad
        else:
            await s.db["trigger_subscriptions"].insert_one(doc)
        await s.stores.subs.put(Subscription(sub_id=f"{t}-good", tenant_id=t, bot="b"))
        extra: list[str] = []
        factory: Any = None
        if side == "mongo-live":  # the command's own client, from a configuration file
            conf = tmp_path / "bo.toml"
            conf.write_text(f'[store]\nbackend = "mongo"\nuri = '
                            f'"{request.getfixturevalue("live_uri")}"\ndatabase = "{s.db.name}"\n')
            extra = ["--config", str(conf)]
        else:
            @asynccontextmanager
            async def opened(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
                yield s.stores

            factory = opened

        async def cli(*args: str) -> tuple[int, str, str]:
            code = await anyio.to_thread.run_sync(
                lambda: main(["subscriptions", *args, *extra], factory=factory))
            out, err = capsys.readouterr()
            assert "Traceback" not in out + err, (args, err)
            return code, out, err

        code, out, _ = await cli("list", "--tenant", t)
        assert code == 0 and f"{t}-good" in out
        assert f"{bad_id}" in out and "DOES NOT DECODE: " in out and "service cannot read" in out
        code, out, _ = await cli("list", "--tenant", t, "--json")
        listed = json.loads(out)
        assert [b["sub_id"] for b in listed["bad_documents"]] == [bad_id]
        assert listed["bad_documents"][0]["problem"]
        code, out, _ = await cli("show", bad_id)
        assert code == 0 and "does not decode: " in out
        code, _, err = await cli("edit", bad_id, "--priority", "1")
        assert code == 2 and "is stored but does not decode" in err and err.count("\n") == 1
        code, _, err = await cli("disable", bad_id)
        assert code == 2 and "does not decode" in err
        # the service ignores it; the good one beside it stands
        assert [x.sub_id for x in await s.stores.subs.list_for_tenant(t)] == [f"{t}-good"]
        code, out, _ = await cli("rm", bad_id, "--yes")
        assert code == 0 and "removed" in out
        with pytest.raises(UsageError):
            await record(s.stores, bad_id)


# --- config and CLI ----------------------------------------------------------------------------


CONFIGS = {
    "uri-tlss": '[store]\nbackend = "mongo"\nuri = "mongodb://127.0.0.1:1/?tlss=true"\n',
    "uri-tlsCAFil": '[store]\nbackend = "mongo"\nuri = "mongodb://127.0.0.1:1/?tlsCAFil=/x"\n',
    "uri-tls-maybe": '[store]\nbackend = "mongo"\nuri = "mongodb://127.0.0.1:1/?tls=maybe"\n',
    "uri-missing-ca": '[store]\nbackend = "mongo"\n'
                      'uri = "mongodb://127.0.0.1:1/?tls=true&tlsCAFile=/nonexistent/ca.pem"\n',
    "database-dot": '[store]\nbackend = "mongo"\ndatabase = "bad.name"\n',
    "database-empty": '[store]\nbackend = "mongo"\ndatabase = ""\n',
    "database-slash": '[store]\ndatabase = "a/b"\n',
    "database-too-long": f'[store]\ndatabase = "{"d" * 64}"\n',
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_bad_config_is_one_line_exit_2(name: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIGS[name])
    assert main(["dead-letters", "list", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("board-outbox: config error: store.")
    assert "Traceback" not in err


# item 6 (issue 20): bounds, cross-field rules, handler kind names; each one line, exit 2
BOUNDS = {
    "interval-1e-9": ("[tail]\npoll_interval_seconds = 1e-9\n", "tail.poll_interval_seconds"),
    "idle-1e-9": ("[worker]\nidle_seconds = 1e-9\n", "worker.idle_seconds"),
    "lease-a-year": ("[worker]\nlease_seconds = 31536000\n", "worker.lease_seconds"),
    "lease-past-sweep-horizon": ("[worker]\nlease_seconds = 50000\n"
                                 "max_execution_seconds = 60000\n",
                                 "stuck-row sweep parks a claimed row"),
    "heartbeat-every-lease": ("[worker]\nheartbeat_fraction = 1.0\n",
                              "worker.heartbeat_fraction"),
    "max-execution-below-lease": ("[worker]\nlease_seconds = 60\nmax_execution_seconds = 30\n",
                                  "worker.max_execution_seconds"),
    "poll-beyond-stall": ("[tail]\npoll_interval_seconds = 300\n", "tail.poll_interval_seconds"),
    "stall-below-young-gap": ("[tail]\nstall_seconds = 20\n", "tail.stall_seconds"),
    "membership-timeout-tiny": ("[membership]\nheartbeat_timeout_seconds = 0.01\n",
                                "membership.heartbeat_timeout_seconds"),
    "batch-size-huge": ("[tail]\nbatch_size = 100000000\n", "tail.batch_size"),
    "handler-kind-slash": ('[handlers]\n"a/b" = "x:Y"\n', "is not an effect kind name"),
    "handler-kind-empty": ('[handlers]\n"" = "x:Y"\n', "is not an effect kind name"),
    "write-concern-1000": ("[store]\nwrite_concern = 1000\n", "store.write_concern"),
}


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_config_out_of_bounds_is_one_line_exit_2(name: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    toml, match = BOUNDS[name]
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    assert main(["dead-letters", "list", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("board-outbox: config error: ")
    assert match in err and "Traceback" not in err


@pytest.mark.parametrize(("var", "value", "field", "expected"), [
    ("SERVICE__REPLICA_NAME", "123", ("service", "replica_name"), "123"),
    ("STORE__DATABASE", "2024", ("store", "database"), "2024"),
    ("STORE__APP_NAME", "1e5", ("store", "app_name"), "1e5"),
    ("LAUNCHER__URL", "true", ("launcher", "url"), "true"),
    ("SERVICE__HTTP_PORT", "9000", ("service", "http_port"), 9000),
    ("TAIL__CHANGE_STREAMS", "false", ("tail", "change_streams"), False),
    ("STORE__WRITE_CONCERN", "2", ("store", "write_concern"), 2),
    ("TAIL__YOUNG_GAP_SECONDS", "45", ("tail", "young_gap_seconds"), 45.0),
])
def test_environment_values_are_converted_by_the_fields_type(
        var: str, value: str, field: tuple[str, str], expected: object) -> None:
    """A numeric-looking replica or database name was turned into a number and rejected."""
    from board_outbox.service.config import load_config

    cfg = load_config(env={f"BOARD_OUTBOX_{var}": value})
    got = getattr(getattr(cfg, field[0]), field[1])
    assert got == expected and type(got) is type(expected)


def test_a_bad_environment_value_names_the_setting(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOARD_OUTBOX_TAIL__POLL_INTERVAL_SECONDS", "soon")
    assert main(["dead-letters", "list"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "tail.poll_interval_seconds (BOARD_OUTBOX_TAIL__POLL_INTERVAL_SECONDS)" in err


@pytest.mark.parametrize("args", [
    ["--limit", "99999999999999999999999"],
    ["--limit", "0"],
    ["--since", "nan"],
    ["--since", "inf"],
    ["--until", "-inf"],
    ["--since", "yesterday"],
    ["--since", "1e20"],  # R7: no stored time lies there
    ["--until", "99999999d"],
])
def test_bad_cli_argument_is_a_usage_error(args: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["dead-letters", "list", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument" in err and "Traceback" not in err


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["memory", "mongomock"])
async def test_audit_and_latency_read_past_bad_rows(backend: str) -> None:
    """A1, A5: rows with a seq that is not an int, no row key, a done_at that is not a date or an
    event time that is not a number are left out of the audit and the latency summary, one
    document at a time; the good rows around them still count."""
    from board_outbox.engine.upkeep.audit import Auditor
    from board_outbox.service.health import effect_latency
    from tests.support.kits import memory_kit

    if backend == "memory":
        kit = memory_kit()
    else:
        from board_outbox.adapters.mongo import ensure_schema
        from tests.support.mongomock_async import mock_database

        db = mock_database()
        await ensure_schema(db)
        kit = mongo_kit(db, "mongomock")
    await kit.card("t1", "c")
    for _ in range(3):
        await kit.emit("t1", "card.updated", "c")
    tail = kit.tail(("board-reflect",), seed="earliest")
    await tail.drain_all(["t1"])
    now = kit.clock.now()
    from datetime import UTC, datetime

    done = datetime.fromtimestamp(now, UTC)
    for bad in ({"row_key": "t1/2.5/proj/x", "seq": 2.5}, {"seq": 2}, {"row_key": ["t1/2"], "seq": 2},
                {"row_key": "t1/1/x", "seq": 1, "state": "done", "done_at": "today",
                 "event": {"at": now}},
                {"row_key": "t1/1/y", "seq": 1, "state": "done", "done_at": done,
                 "event": {"at": "then"}},
                {"row_key": "t1/1/z", "seq": 1, "state": "done", "done_at": done, "event": "e"}):
        await kit.insert_raw_row({"tenant_id": "t1", "kind": "projection", **bad})
    await kit.insert_raw_row({"tenant_id": "t1", "row_key": "t1/1/ok", "seq": 1, "state": "done",
                              "kind": "launch", "done_at": done, "event": {"at": now - 2}})
    rep = await Auditor(tail).audit("t1")
    assert rep.missing == [] and rep.events == 3
    assert sorted(f.row_key for f in rep.orphaned) == ["t1/1/ok", "t1/1/x", "t1/1/y", "t1/1/z"]
    lat = await effect_latency(kit.stores, now + 1)
    assert lat["t1"].rows == 1 and lat["t1"].p50 == 2.0



BAD_DEAD_LETTERS: list[dict[str, Any]] = [  # each a failed t1 launch row of s1 but for one field
    {"attempts": "3"}, {"errors": "boom"}, {"audit": 5}, {"event": "e"}, {"sub_id": ["s1"]},
    {"errors": [{"error": 5}]}, {"tenant_id": 7}, {"kind": 9}, {"updated_at": "yesterday"},
    {"row_key": 12}, {"state": "failed ", "updated_at": 0.5},
    # R7: beyond 9999-12-31 (it once decoded, as 2^62, and only the fence kept it): no time
    {"updated_at": 2**62 + 1},
]


@pytest.mark.anyio
async def test_bulk_replay_takes_the_good_dead_letters_past_bad_ones(kit: Kit) -> None:
    """Issue 33 item 5: failed rows with wrong-typed fields that a filter matches cost only
    themselves -- those that do not decode are counted and named by the plan and never written,
    those the store cannot name (a row key or parked time of another type) are not walked, and
    one whose stored parked time is out of the time range (R7) does not decode either -- while
    every good row beside them is planned and replayed, on every backend."""
    from board_outbox.engine.upkeep.bulk_replay import apply_bulk_replay, plan_bulk_replay
    from board_outbox.model.board import EventSnapshot
    from board_outbox.model.codec import to_doc
    from board_outbox.model.dead_letters import BulkFilter
    from board_outbox.model.rows import ErrorEntry, new_launch_row

    sub = Subscription(sub_id="s1", tenant_id="t1", bot="b")
    await kit.subs.put(sub)
    at = kit.clock.now() - 600

    def row(i: int) -> dict[str, Any]:
        ev = EventSnapshot(seq=i, type="card.created", card_id="c", at=at)
        r = new_launch_row("t1", ev, sub, at)
        r.state, r.attempts, r.updated_at = "failed", 3, at + i  # type: ignore[assignment]
        r.errors = [ErrorEntry(attempt=3, at=at, error="LaunchFailed: 503")]
        return to_doc(r)

    for i in (1, 2, 3):
        await kit.insert_raw_row(row(i))
    for i, bad in enumerate(BAD_DEAD_LETTERS, start=10):
        await kit.insert_raw_row({**row(i), **bad} if "row_key" in bad
                                 else {**row(i), **bad, "row_key": f"t1/{i}/sub/s1"})
    keys = [f"t1/{i}/sub/s1" for i in range(10, 10 + len(BAD_DEAD_LETTERS))]
    before = {k: await kit.raw_row(k) for k in keys}
    plan = await plan_bulk_replay(kit.outbox, kit.subs, BulkFilter(tenant="t1", kind="launch"),
                                  clock=kit.clock, page=2)
    undecodable = ["t1/10/sub/s1", "t1/11/sub/s1", "t1/12/sub/s1", "t1/13/sub/s1",
                   "t1/14/sub/s1", "t1/15/sub/s1", "t1/21/sub/s1"]
    assert plan.matched == 3 and plan.unreadable == len(undecodable)
    assert sorted(plan.unreadable_keys) == undecodable
    prog = await apply_bulk_replay(kit.outbox, kit.subs, plan, bulk_id="x", by="ops",
                                   clock=kit.clock, rate=1e6)
    assert (prog.state, prog.replayed, prog.skipped, prog.refused) == ("done", 3, 0, 0)
    for i in (1, 2, 3):
        good = await kit.raw_row(f"t1/{i}/sub/s1")
        assert good is not None and good["state"] == "pending" and len(good["audit"]) == 1
    for k in keys:  # every bad row exactly as it was
        after = await kit.raw_row(k)
        assert (after is None) == (before[k] is None) and (after is None or after == before[k]), k


@pytest.mark.anyio
async def test_listing_failed_rows_by_time_reads_past_bad_times(kit: Kit) -> None:
    """``OutboxStore.find`` with a time window (the dead-letter listing's ``--since``) over
    failed rows whose ``updated_at`` is a string, null or missing: as on the server, a time
    bound matches numbers only, the rest of the listing stands, and the order is newest first
    over whatever is stored (the memory twin once compared a string with a float: TypeError)."""
    from board_outbox.model.board import EventSnapshot
    from board_outbox.model.codec import to_doc
    from board_outbox.model.records import RowFilter
    from board_outbox.model.rows import new_launch_row

    sub = Subscription(sub_id="s1", tenant_id="t1", bot="b")
    at = kit.clock.now() - 600

    def row(i: int, **fields: Any) -> dict[str, Any]:
        ev = EventSnapshot(seq=i, type="card.created", card_id="c", at=at)
        r = new_launch_row("t1", ev, sub, at)
        r.state, r.attempts, r.updated_at = "failed", 3, at + i  # type: ignore[assignment]
        return {**to_doc(r), **fields}

    await kit.insert_raw_row(row(1))
    await kit.insert_raw_row(row(2))
    await kit.insert_raw_row(row(3, updated_at="yesterday"))
    await kit.insert_raw_row(row(4, updated_at=None))
    missing = row(5)
    del missing["updated_at"]
    await kit.insert_raw_row(missing)
    since = await kit.outbox.find(RowFilter(tenant_id="t1", states=("failed",), updated_after=at))
    assert [r.row_key for r in since] == ["t1/2/sub/s1", "t1/1/sub/s1"]
    window = await kit.outbox.find(RowFilter(tenant_id="t1", states=("failed",),
                                             updated_after=at + 1.5, updated_before=at + 10))
    assert [r.row_key for r in window] == ["t1/2/sub/s1"]
    every = await kit.outbox.find(RowFilter(tenant_id="t1", states=("failed",)))
    assert [r.row_key for r in every][:2] == ["t1/2/sub/s1", "t1/1/sub/s1"]  # bad ones: left out




# --- operators' power tools (A8) ----------------------------------------------------------------


@pytest.mark.anyio
async def test_a_bulk_cancel_walks_past_pending_rows_that_do_not_decode(kit: Kit) -> None:
    """A8: pending rows with wrong-typed fields cost only themselves: the cancel's plan counts
    and names those that do not decode and never writes them; one whose row key or time is of
    another type is not walked; every good row beside them is cancelled, on every backend."""
    from board_outbox.engine.upkeep.bulk_actions import cancel_write
    from board_outbox.engine.upkeep.bulk_replay import apply_bulk, plan_bulk_replay
    from board_outbox.model.board import EventSnapshot
    from board_outbox.model.dead_letters import BulkFilter
    from board_outbox.model.rows import new_launch_row

    sub = Subscription(sub_id="s1", tenant_id="t1", bot="b")
    now = kit.clock.now()
    good = [new_launch_row("t1", EventSnapshot(seq=i, type="card.created", card_id="c"), sub, now)
            for i in (1, 2)]
    for row in good:
        row.not_before = now + 3600  # not due: no claim races this test
    await kit.outbox.upsert_rows(good)
    base = {"tenant_id": "t1", "state": "pending", "not_before": now + 3600, "sub_id": "s1",
            "kind": "launch"}
    await kit.insert_raw_row({**base, "row_key": "t1/3/sub/s1", "seq": 3, "updated_at": now,
                              "attempts": "three"})  # does not decode
    await kit.insert_raw_row({**base, "row_key": 4, "seq": 4, "updated_at": now})  # no key
    await kit.insert_raw_row({**base, "row_key": "t1/5/sub/s1", "seq": 5, "updated_at": "now"})
    flt = BulkFilter(state="pending", tenant="t1")
    plan = await plan_bulk_replay(kit.outbox, kit.subs, flt, clock=kit.clock, page=2)
    assert (plan.matched, plan.unreadable, plan.unreadable_keys) == (2, 1, ["t1/3/sub/s1"])
    write = cancel_write(kit.outbox, bulk_id="x", by="ops", why="w", clock=kit.clock)
    prog = await apply_bulk(kit.outbox, kit.subs, plan, write, bulk_id="x", by="ops",
                            clock=kit.clock, rate=1000.0, page=2)
    assert (prog.state, prog.applied) == ("done", 2)
    assert (await kit.raw_row("t1/3/sub/s1") or {})["state"] == "pending"
    assert {(await kit.raw_row(r.row_key) or {}).get("state") for r in good} == {"cancelled"}


@pytest.mark.anyio
async def test_a_cancel_of_expired_leases_reads_past_claimed_rows_that_do_not_decode(kit: Kit) -> None:
    """A8: with include_expired, claimed rows with wrong-typed fields cost only themselves: the
    plan counts and names the one that does not decode and never writes it; one whose lease end
    is not a number is never taken as expired; the good expired row beside them is cancelled,
    on every backend."""
    from board_outbox.engine.upkeep.bulk_actions import cancel_write
    from board_outbox.engine.upkeep.bulk_replay import apply_bulk, plan_bulk_replay
    from board_outbox.model.board import EventSnapshot
    from board_outbox.model.dead_letters import BulkFilter
    from board_outbox.model.rows import new_launch_row

    sub = Subscription(sub_id="s1", tenant_id="t1", bot="b")
    now = kit.clock.now()
    good = new_launch_row("t1", EventSnapshot(seq=1, type="card.created", card_id="c"), sub, now)
    good.state, good.claim_id, good.lease_until = "claimed", "gone", now - 60  # type: ignore[assignment]
    await kit.outbox.upsert_rows([good])
    base = {"tenant_id": "t1", "state": "claimed", "not_before": now, "sub_id": "s1",
            "kind": "launch", "claim_id": "gone", "updated_at": now - 90}
    await kit.insert_raw_row({**base, "row_key": "t1/2/sub/s1", "seq": 2, "lease_until": now - 60,
                              "attempts": "three"})  # does not decode
    await kit.insert_raw_row({**base, "row_key": "t1/3/sub/s1", "seq": 3, "lease_until": "soon"})
    flt = BulkFilter(state="pending", tenant="t1", include_expired=True)
    plan = await plan_bulk_replay(kit.outbox, kit.subs, flt, clock=kit.clock)
    assert (plan.matched, plan.expired) == (1, 1)
    assert "t1/2/sub/s1" in plan.unreadable_keys
    write = cancel_write(kit.outbox, bulk_id="x", by="ops", why="w", clock=kit.clock)
    prog = await apply_bulk(kit.outbox, kit.subs, plan, write, bulk_id="x", by="ops",
                            clock=kit.clock, rate=1000.0)
    assert (prog.state, prog.applied) == ("done", 1)
    assert (await kit.raw_row(good.row_key) or {})["state"] == "cancelled"
    for key in ("t1/2/sub/s1", "t1/3/sub/s1"):
        assert (await kit.raw_row(key) or {})["state"] == "claimed"


@pytest.mark.anyio
async def test_a_rerun_reads_past_done_rows_whose_history_or_rerun_of_does_not_decode(kit: Kit) -> None:
    """A8: a rerun reads each done row's history and ``rerun_of`` to leave out the rows re-run
    already; a row whose history is not a list, whose entry has no time, or whose ``rerun_of``
    is a number costs only itself: counted and named, never re-run (no new row of its key);
    a good row noted before is counted as re-run already, and the good row beside them is
    re-run once, on every backend."""
    from board_outbox.engine.upkeep.bulk_actions import rerun_write
    from board_outbox.engine.upkeep.bulk_replay import apply_bulk, plan_bulk_replay
    from board_outbox.model.dead_letters import BulkFilter

    sub = Subscription(sub_id="s1", tenant_id="t1", bot="b")
    now = kit.clock.now()
    good = new_launch_row("t1", EventSnapshot(seq=1, type="card.created", card_id="c"), sub, now)
    good.state = "done"  # type: ignore[assignment]
    await kit.outbox.upsert_rows([good])
    base = {"tenant_id": "t1", "state": "done", "not_before": now, "sub_id": "s1",
            "kind": "launch", "updated_at": now, "outcome": "launched"}
    note = {"at": now, "action": "rerun", "by": "ops", "detail": "re-run as t1/2/sub/s1/rerun/1"}
    await kit.insert_raw_row({**base, "row_key": "t1/2/sub/s1", "seq": 2, "audit": [note]})
    bad = {"t1/3/sub/s1": {"audit": "rerun"}, "t1/4/sub/s1": {"audit": [{"action": "rerun"}]},
           "t1/5/sub/s1": {"rerun_of": 7}}
    for seq, (key, fields) in enumerate(bad.items(), start=3):
        await kit.insert_raw_row({**base, "row_key": key, "seq": seq, **fields})
    flt = BulkFilter(state="done", tenant="t1")
    plan = await plan_bulk_replay(kit.outbox, kit.subs, flt, clock=kit.clock, page=2)
    assert (plan.matched, plan.already_rerun, plan.unreadable) == (1, 1, 3)
    assert sorted(plan.unreadable_keys) == sorted(bad)
    write = rerun_write(kit.outbox, bulk_id="x", by="ops", clock=kit.clock)
    prog = await apply_bulk(kit.outbox, kit.subs, plan, write, bulk_id="x", by="ops",
                            clock=kit.clock, rate=1000.0, page=2)
    assert (prog.state, prog.applied) == ("done", 1)
    assert await kit.raw_row(f"{good.row_key}/rerun/1") is not None
    for key in [*bad, "t1/2/sub/s1"]:
        assert await kit.raw_row(f"{key}/rerun/1") is None


@pytest.mark.anyio
async def test_an_api_token_document_that_does_not_decode_authorizes_nothing() -> None:
    """A8: a stored token with a scope outside the enum, or a digest that is not a string,
    authorizes nothing (reported once as a bad document); a good token beside it works."""
    from board_outbox.engine.upkeep.api_tokens import authenticate, create_token
    from board_outbox.model.api_tokens import API_TOKENS_COLLECTION, digest, token_text
    from board_outbox.model.bad_documents import BAD_DOCUMENTS
    from board_outbox.model.clock import SystemClock

    b = MemoryBackend()
    secret = "s" * 43
    b.api_tokens.put_raw("00000000000000aa", {"name": "x", "scope": "root", "created_at": 1.0,
                                              "digest": digest(secret)})
    b.api_tokens.put_raw("00000000000000bb", {"name": "y", "scope": "admin", "created_at": 1.0,
                                              "digest": 7})
    for tid in ("00000000000000aa", "00000000000000bb"):
        assert await authenticate(b.api_tokens, token_text(tid, secret)) is None
    assert API_TOKENS_COLLECTION in BAD_DOCUMENTS.counts
    text, _tok = await create_token(b.api_tokens, name="ok", scope="read", by="t",
                                    clock=SystemClock())
    assert (await authenticate(b.api_tokens, text)) is not None
    assert [t.name for t in await b.api_tokens.all()] == ["ok"]
    for hostile in ("", "bo_", text + "\n", text.upper(), "bo_../../_x", "Bearer " + text):
        assert await authenticate(b.api_tokens, hostile) is None


# --- forwarded headers through a trusted proxy (U3) ------------------------------------------

HOSTILE_FORWARDED = [
    "for=1.2.3.4;for=5.6.7.8", "for=", 'for="unclosed', "for=a b", ";;=;", "\x00", "for=_x:99",
    'for="[2001:db8::1"', "for=unknown", "for=999.1.1.1", "proto=gopher;host=a/b", "," * 200,
    "x" * 4000, 'for="\\\\\\"', "for=1.2.3.4:99999", "host=evil.example:1:2",
]
HOSTILE_X_FORWARDED = [
    "<script>", "1.2.3.4:", "[::1", ",,,", "1.2.3.4, ", "999.1.1.1", "1.2.3.4:port",
    ", ".join(["10.0.0.9"] * 70), "unknown", "\x00\x01", "x" * 4000,
]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["x-forwarded", "forwarded"])
async def test_hostile_forwarded_headers_cost_only_their_request(
        mode: str, caplog: pytest.LogCaptureFixture) -> None:
    """A trusted proxy passing the client's hostile forwarded headers on (with its own entry
    appended): every request is answered (never a 500), and the login throttle sees only the
    client the proxy wrote or the proxy itself -- no header picks or mints a client."""
    import re

    import httpx

    from board_outbox.service.config import load_config
    from board_outbox.surface.console import build_console
    from board_outbox.surface.http.app import build_app
    from board_outbox.surface.http.proxies import proxy_settings
    from board_outbox.surface.http.server import guarded
    from tests.test_console import TOKEN, csrf_of

    cfg = load_config(env={}, ui={"admin_token": TOKEN, "trusted_proxies": ["10.0.0.2"],
                                  "proxy_headers": mode}, service={"allowed_hosts": ["c.example"]})
    app = guarded(build_app([], ui=build_console(MemoryBackend().stores(), cfg)), "127.0.0.1",
                  cfg.service.allowed_hosts, proxy_settings(cfg.ui))
    caplog.set_level(logging.WARNING, logger="board_outbox.console")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=("10.0.0.2", 1)),
                                 base_url="http://127.0.0.1:9464") as client:
        for bad in HOSTILE_FORWARDED if mode == "forwarded" else HOSTILE_X_FORWARDED:
            if mode == "forwarded":
                headers = {"Forwarded": f"{bad}, for=203.0.113.7;proto=https;host=c.example"}
            else:
                headers = {"X-Forwarded-For": f"{bad}, 203.0.113.7", "X-Forwarded-Proto": "https",
                           "X-Forwarded-Host": "c.example"}
            page = await client.get("/ui/login", headers=headers)
            assert page.status_code == 200, (bad, page.status_code)
            # the cookie by hand: httpx keeps a Secure one off this plain-http leg
            cookie = page.headers["set-cookie"].split(";", 1)[0]
            client.cookies.clear()
            r = await client.post("/ui/login", headers={**headers, "Origin": "https://c.example",
                                                        "Cookie": cookie},
                                  data={"csrf": csrf_of(page.text), "token": "x" * 20})
            assert r.status_code in (403, 429), (bad, r.status_code)
    logins = {m.group(1) for m in (re.search(r"login from (\S+)", rec.getMessage())
                                   for rec in caplog.records) if m}
    assert logins and logins <= {"203.0.113.7", "10.0.0.2"}, logins


# --- note table (issue 14): input -> behaviour before -> behaviour after ---------------------
#
# row claimed, lease past, attempts:"3"   -> reclaim $inc StoreError ends the process, crash-loops
#                                          -> BrokenRow names it; parked with one $set, one line
# row errors:"boom" parked / reclaimed    -> $push StoreError ends the process, crash-loops
#                                          -> parked with one $set (errors list rebuilt), one line
# card title 16 MiB - 400 chars + event   -> 16 MB upsert StoreError, 33 MB message, process exits
#                                          -> card over 64K title chars is malformed: poison path,
#                                             one line; every store error text capped at 2,000
# trigger_cursors seq:"abc" (or 2.5, true)-> ValueError traceback, process exits
#                                          -> that tenant stalls (Tail.stalled), one line; others flow
# event seq NumberDecimal / 2.5           -> TypeError in the gap check / CAS never succeeds
#                                          -> event left out with one line; later events flow
# event seq 2^63-1 or another counter's   -> stepped over as dead allocation, cursor jumps, tenant lost
#                                          -> poison beyond the counter: never stepped to, one line
# tenant_id "c05/x"                       -> every event silently skipped as "card deleted"
#                                          -> tenant not drained, one line (card keys mapped, not split)
# subscription _id != sub_id              -> every launch "dropped: subscription deleted"
#                                          -> found by sub_id: launches
# row state:"weird", not_before:"soon",   -> stuck forever, no log
#   tenant_id:5, claimed w/o lease_until,  -> swept (every 60 s) and parked with one line; the
#   lease_until:1e12, state missing           parked row decodes (bad fields replaced)
# pending row attempts:"3"                -> parked but invisible to dead-letters list/purge
#                                          -> parked with bad fields replaced: listed and purgeable
# subscription tenant_id:[t, healthy]     -> ERROR on every batch of the healthy tenant
#                                          -> one ERROR per distinct problem
# consume_labels of 10,000 entries        -> 5 s consume, whole service pauses on NetworkTimeouts
#                                          -> malformed (> 100 entries): ignored with one line; a row
#                                             naming it parks at once (PermanentEffectError)
# an unexpected TypeError in one tenant   -> whole drain pass aborted, every tenant waits
#                                          -> that tenant stalls, one line; others flow
# store.uri tlss=true / tlsCAFil= / tls=maybe -> UserWarning only, runs WITHOUT TLS
#                                          -> one-line config error, exit 2
# store.uri tlsCAFile missing, database "bad.name" / "" -> traceback -> one line, exit 2
# dead-letters list --limit 10^23         -> OverflowError traceback -> usage error, exit 2
# dead-letters list --since nan           -> "no dead-letters"       -> usage error, exit 2
# subscription kind:"no/such" / "" /      -> (no kind field: every subscription launched)
#   "projection" / 7                       -> that subscription ignored with one line; the
#                                             tenant's others launch; `put` refuses such a kind
# subscription of a kind nobody handles   -> (no kind field)
#                                          -> its rows are written and dead-lettered ("no effect
#                                             handler registered"); the tail says so once
# row seq 2.5 / no row_key / done_at "today" / event.at "then" (audit, status latency; A1, A5)
#                                          -> (new) left out one document at a time; others count
# pause scope "galaxy" / active "yes" / key [t] / at Infinity / reason of 16K / audit garbage /
#   an _id naming one tenant and a key naming another (issue 33)
#                                          -> (new) left out with one line (listed by `paused` and
#                                             status --json); it pauses nothing, the others stand;
#                                             `pause` writes it whole again
# a row held for a pause that no longer exists (its replica died before releasing it)
#                                          -> (new) released by the first pause read's sweep; runs
# row trace id "0x"+30 c / with a newline / upper case / all zeros (issue 30) -> served as an
#                                          exemplar and linked by the console -> the row runs;
#                                          no exemplar, the console shows "none recorded"
# failed row attempts:"3" / errors:"boom" / audit:5 / event:"e" / sub_id:["s1"] / tenant_id:7
#   matched by a bulk replay's filter      -> (new) counted and named by the plan as not decoding,
#                                             never written; the good rows replayed
# failed row updated_at:"yesterday" / row_key:12 -> (new) not walked (as dead-letters list)
# failed row updated_at 2^62+1 (no float holds it) -> (new) planned, skipped by the fence
#                                          -> (R7) out of the time range: does not decode;
#                                             counted and named by the plan, left alone
# failed row updated_at "yesterday"/null/missing, listed with --since -> memory twin TypeError
#                                          -> left out of the time window, as on the server
# trigger_series minute 61 s past / 0.0, replica "", counts "lots" / done -5 / Decimal, base dead true,
#   lag tenant {$gt: ""} / n 1e308 / 10,001 entries, lag_total "many" (issue 33, the charts)
#                                          -> (new) left out of the charts and the sparklines, one
#                                             line, listed by status --json; the good documents of
#                                             the same minutes still draw
# trigger_series counts "lots" under the very (minute, replica) a flush writes
#                                          -> (new) that flush refused ($max on a non-document),
#                                             one line; its counts go with the next minute's
#
# --- note table (issue 20): input -> before -> after -----------------------------------------
#
# member lease expires_at "soon" / Decimal128 -> `run` exits 1 at start (traceback) on every
#                                          replica, `status` too -> lease left out, one line,
#                                          listed by status --json (bad_documents), counted
# member lease expires_at 1e12            -> a live member forever: its tenants never drained
#                                          -> beyond heartbeat_timeout_seconds: not trusted, one line
# member _id 7 (not a string)             -> a live member forever -> left out, one line
# read_model_versions active:"x" (any model/tenant, even unknown) -> every tenant's projection
#                                          rows fail and park -> only that model/tenant's writes
#                                          fail (StoreError naming the pointer), one line
# resume token "garbage" / ["x"] / {}     -> stream never opens, ERROR every few seconds, /readyz
#                                          ready -> loads as None (one line), stream opens at now,
#                                          the first full poll covers the gap
# resume token {_data:"garbage"} / another collection's (server refuses) -> same as above ->
#                                          3 attempts, one line, dropped, stream reopens + full
#                                          poll; degraded "stream" and board_outbox_poll_only meanwhile
# counter seq "lots" / cursor seq "abc"   -> status, /metrics per-tenant gauges and stall
#                                          detection blank for EVERY tenant -> that tenant carries a
#                                          `problems` entry, the others stand; one line; counted
# cursor ahead of its counter (restored)  -> events up to it skipped, no line, /readyz ready, lag 0
#                                          -> tenant held (durably, across restarts), one line,
#                                             degraded "cursor", board_outbox_cursor_ahead, status
#                                             problems; `cursor reset --tenant T --to N` releases it
#                                             and every event launches
# 20,000 counters at seq 0, no cursor     -> first poll seeds them one by one (minutes), a live
#                                          tenant's event waits -> one bulk write after the pass
#                                          (benchmarks/README.md: start-up to first launch)
# status / metrics refresh, N tenants     -> ~5 reads per tenant per refresh -> 7 queries, any N
# tail.poll_interval_seconds = 1e-9, worker.lease_seconds = 1 year, heartbeat_fraction = 1,
#   lease beyond the sweep horizon, poll >= stall, [handlers] "a/b" -> accepted -> one-line
#                                          config error, exit 2
# a handler / projection apply / prepare that never returns (tests/test_effect_deadlines.py) ->
#                                          that replica's worker stops for every tenant, /healthz 200
#                                          -> cancelled at max_execution_seconds, the attempt counts,
#                                          retried or parked; other rows and tenants run on
# a plugin that blocks the event loop     -> every loop frozen, nothing names it -> measured by the
#                                          watchdog, one warning naming the step, a metric
# BOARD_OUTBOX_SERVICE__REPLICA_NAME=123, BOARD_OUTBOX_STORE__DATABASE=2024 -> rejected
#                                          ("expected str, got int") -> accepted as strings
#
# --- note table (issue 33, explain): input -> before -> after --------------------------------
#
# explain of a key no row has ("acme/9/sub/s")   -> (new) RowNotFound; the CLI one line, exit 2
# explain of a text that is no key ("", "a/x/sub/s", "a/1/sub/s\n", a 300-character name, a NUL,
#   "a/1/sub/{'$ne': 1}")                        -> (new) InvalidRowKey before any read; the CLI
#                                                   one line, exit 2, the store never opened
# explain of a row with attempts "many", errors "boom", state "weird", not_before "soon",
#   event "e", lease_until [1], waiting 5, an audit entry without at
#                                                -> (new) a "malformed" hold naming the field;
#                                                   the rows beside it explain as ever; the
#                                                   console's row page shows it (200)
# a limit slot with holder 5 / until "soon" / until a month ahead / until past
#                                                -> (new) not a holder (the bad ones reported
#                                                   once, as acquire reports them)
# a rate counter n -5                            -> (new) the window reads full, used unknown
# a membership lease expires_at "soon"           -> (new) no owner from it; the good lease owns
# the event's at "yesterday"                     -> (new) its moment undated, with a note
# a row's waiting "over some limit" (no limit named) -> (new) a note, no limit hold invented
#
# --- note table (C7, an event's trace context): input -> before -> after -----------------------
#
# an event's trace a string, a list, a traceparent "0x…", 7 or 1 MB long
#                                                -> (never read) -> no parent: the event's rows
#                                                   join their batch's trace, one line per tenant
#                                                   and problem; the event launches as ever
# a tracestate of 10,000 characters, 5, or "no state,\n=="
#                                                -> (never read) -> dropped, the traceparent kept
#                                                   (the rows still continue the producer's trace),
#                                                   one line per tenant and problem
#
# --- note table (issue 33, priorities): input -> before -> after ------------------------------
#
# subscription priority "high" / 10**9 / -1e9 / NaN / true
#                                                -> (new) the subscription is malformed: ignored,
#                                                   one line; the tenant's other subscriptions flow
# row priority "high" / 10**9 / true             -> (new) ordered as 0 by the pick (claimed in its
#                                                   turn), then parked as a malformed row when
#                                                   claimed: it costs only itself
#

# --- note table (U3, forwarded headers): input -> before -> after ------------------------------
#
# X-Forwarded-For "6.6.6.6, <client>" / a fresh value per login, from anyone
#                                          -> ignored (the client was the socket's: every operator
#                                             behind one proxy shared a throttle bucket)
#                                          -> from a trusted proxy, read from the right: the client
#                                             the proxy wrote; from anyone else, ignored
# X-Forwarded-Proto https / Forwarded proto=https from a peer not trusted
#                                          -> ignored; (before: also from the proxy: its https
#                                             logins were refused 403) -> still ignored
# Forwarded element that does not parse, "unknown", garbage entries, lists of 70
#                                          -> (new) the proxy that reported it stands for the
#                                             client; its scheme and host are not believed
# identity header from a peer not trusted, twice, empty, 129 characters, a control character
#                                          -> (new) no name: the login is refused saying why
#
# --- note table (R7, times out of range): input -> before -> after ----------------------------
#
# pause at 1e12 (a JavaScript writer's milliseconds) / at inf / an audit entry at 1e12
#                                          -> `paused` "ValueError: year 33658 is out of range";
#                                             /ui/, /ui/pauses and every tenant page 500; the pause
#                                             held the tenant (1e12 and inf were finite enough)
#                                          -> malformed: it pauses nothing; one line, listed by
#                                             `paused`, status --json and the pause panels, counted
# failed row updated_at +inf / -inf / 1e20 / -1e308 (and 2^62+1)
#                                          -> `dead-letters list`, `replay --filter ... --dry-run`,
#                                             /ui/dead-letters and the plan page: OverflowError
#                                             tracebacks and 500s; bulk replay could not be planned
#                                          -> does not decode: the listings name it with why, the
#                                             plan counts and names it and never writes it; explain
#                                             and its row page say `malformed` (the field, the value)
# pending row created_at -1e15 / an error entry at 1e12 / not_before -1e308
#                                          -> explain and the row pages: ValueError / OverflowError
#                                             tracebacks and 500s; status: "oldest pending 2.8e11 h"
#                                          -> malformed: explained; claimed and parked, its bad
#                                             fields replaced, the error entries that decode kept;
#                                             status's oldest pending row passes over it
# pending row not_before 1e12 / inf (due beyond any writer's reach)
#                                          -> never claimed, never swept, counted as "paused"
#                                          -> the stuck-row sweep parks it with one line
# pending row updated_at inf               -> (ran: the claim writes updated_at) -> runs, as before
# event at 1e12 / -inf                     -> read as a time (latency, audit age, explain: a
#                                             traceback on the timeline)
#                                          -> read as no time, one line (board_events listed as a
#                                             bad document); the event runs
# membership lease expires_at 1e12         -> "further ahead than the heartbeat timeout"
#                                          -> "out of range ... a millisecond timestamp?" (not a lease)
# `--filter since=1e20` / `--since 99999999d` -> the plan raised formatting the bound (OverflowError)
#                                          -> usage error, exit 2
# subscription priority 99 / bot 7 / rule "card.moved" / kind "projection" / coalesce 60 > 5 /
#   no bot, in `subscriptions list|show|edit|rm` (P6)
#                                          -> (new) listed by id with why it does not decode (the
#                                             service ignores it); edit and disable refuse it in
#                                             one line, exit 2; rm removes it
# `subscriptions add` with priority 11 / coalesce 60:5 / an unknown kind / 101 labels / a bot
#   with a control character / a file with an unknown field (P6)
#                                          -> (new) one line, exit 2, nothing written
# subscription sub_id "acme/x" or "acme\n" (stored by another tool)
#                                          -> ran: its rows' keys carried the slash or newline, and
#                                             no command (explain, dead-letters) could address them
#                                          -> malformed: one line, the subscription ignored
# subscription bot "" / "pager\n" / " pager" (stored by another tool)
#                                          -> launched at an empty or untypable name (pause --bot
#                                             could not name it)
#                                          -> malformed: one line, the subscription ignored
# a BSON date past year 9999 in done_at    -> (mongod) the driver raised for the whole reply
#                                          -> DATETIME_AUTO: that row alone is malformed (the wire
#                                             server refuses to store such a date: codec test)
#
# --- note table (A8, a rerun's rows re-run already): input -> before -> after -------------------
#
# a done row whose audit is "rerun", whose audit entry has no at, whose rerun_of is 7
#                                          -> counted and named as not decoding, never re-run ->
#                                             the same (now also read for its rerun note)
# a rerun repeated after a kill midway, no before= -> the rows the killed apply re-ran planned
#                                             again (/rerun/2) and its new rows, done by then,
#                                             re-run (/rerun/1/rerun/1) -> both left out, counted
#                                             as re-run already (include_rerun takes them)
# the API's include_rerun "yes" / 1 / null / {"$ne": false} / [true], or true on a cancel or a
#   replay                                 -> (new) 400, one line; nothing read or written
# the console's include_rerun "yes" / '{"$ne": 0}', or 1 on a cancel or a replay (plan or apply)
#                                          -> (new) 400 page naming it; nothing written
# `--include-rerun` on rows cancel or dead-letters replay -> (new) one line, exit 2, no store


@pytest.mark.parametrize("value", ["abc\n", "abc\r\n", "\nabc", "a b", "a/b", ""])
def test_an_id_with_a_newline_or_a_separator_is_refused(value: str) -> None:
    """``^...$`` with ``match`` let ``"abc\\n"`` through (``$`` matches before a final newline):
    an id is the whole text or nothing, wherever it is checked (row keys, tenants, kinds)."""
    from board_outbox.model.errors import InvalidId
    from board_outbox.model.ids import check_id
    from board_outbox.model.validation import tenant_problem

    with pytest.raises(InvalidId):
        check_id("tenant_id", value)
    assert tenant_problem(value) is not None
