"""Every statement that names rows stays bounded by the ``_id`` index and goes out in chunks that
fit well inside the op timeout, on the wire (command monitoring: each statement's filter, hint
and size).

A lease beat over 703 leases went out as one ``update_many`` of 703 ids and timed out at the op
timeout, and a planner that plans a multi-field filter on whatever clause it meets first can
scan the collection for it. So: a lease beat, a batch of done marks, a claim, an expired-lease
reclaim, their read backs and the release of held rows each name their rows by ``_id`` first,
at most ``ROW_CHUNK`` (100) a statement; the writes are hinted to the ``_id`` index; the reads
filter by ``_id`` alone (a filter every planner serves from that index: the server's own
explain says so below) and check the fence on what comes back.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from board_outbox.adapters.mongo import ensure_schema
from board_outbox.adapters.mongo.outbox import MongoEffectOutbox
from board_outbox.adapters.mongo.outbox.statements import EFFECTS, ROW_CHUNK
from board_outbox.engine.flow.leases import BEAT_CHUNK, Lease, Leases
from board_outbox.model import transitions as tr
from board_outbox.model.clock import ManualClock
from board_outbox.model.pause import held_not_before
from board_outbox.model.rows import EffectRow
from board_outbox.ports import ClaimTerms

pytestmark = [pytest.mark.anyio, pytest.mark.live_mongo]

ROWS = ROW_CHUNK + 30  # two statements' worth
HISTORY = 200  # done rows beside them: a statement that scanned would examine these too


class Statements(monitoring.CommandListener):
    """The commands sent to ``trigger_effects``: (name, command)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command.get(event.command_name) == EFFECTS:
            self.sent.append((event.command_name, dict(event.command)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        out, self.sent = self.sent, []
        return out


class Wire:
    def __init__(self, uri: str) -> None:
        self.statements = Statements()
        self.client: Any = AsyncMongoClient(uri, tz_aware=True,
                                            event_listeners=[self.statements])
        self.db = self.client[f"bo_bounded_{uuid.uuid4().hex[:8]}"]
        self.outbox = MongoEffectOutbox(self.db)
        self.clock = ManualClock(1000.0)

    async def rows(self, n: int, *, claim: ClaimTerms | None = None, tenant: str = "t",
                   not_before: float = 1.0) -> list[Any]:
        rows = [EffectRow(tenant_id=tenant, seq=i, row_key=f"{tenant}/{i}/{uuid.uuid4().hex}",
                          sub_id="s", created_at=1.0, updated_at=1.0, not_before=not_before)
                for i in range(1, n + 1)]
        res = await self.outbox.upsert_rows(rows, claim=claim)
        return list(res.claims)


@pytest.fixture
async def wire(live_uri: str) -> AsyncIterator[Wire]:
    w = Wire(live_uri)
    await ensure_schema(w.db)
    # the history a scan would read: done rows of another tenant
    await w.db[EFFECTS].insert_many([
        {"row_key": f"old/{i}", "tenant_id": "old", "seq": i, "state": "done", "attempts": 0,
         "not_before": 1.0, "created_at": 1.0, "updated_at": 1.0} for i in range(HISTORY)])
    w.statements.take()
    try:
        yield w
    finally:
        await w.client.drop_database(w.db.name)
        await w.client.close()


def updates(sent: list[tuple[str, dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """Each update command's statements."""
    return [list(cmd["updates"]) for name, cmd in sent if name == "update"]


def named(q: dict[str, Any]) -> list[Any]:
    """The ids a by-id filter names (its first clause is ``_id``)."""
    assert next(iter(q)) == "_id", q  # the clause every planner serves first
    ids = q["_id"]
    return list(ids["$in"]) if isinstance(ids, dict) else [ids]


def check_writes(commands: list[list[dict[str, Any]]]) -> int:
    """Every statement names its rows by ``_id``, hinted to that index; a command names at most
    ``ROW_CHUNK`` rows. The rows named, in all."""
    total = 0
    for statements in commands:
        rows = 0
        for u in statements:
            assert u.get("hint") == {"_id": 1}, u
            rows += len(named(u["q"]))
        assert 0 < rows <= ROW_CHUNK, rows
        total += rows
    return total


async def check_reads(w: Wire, sent: list[tuple[str, dict[str, Any]]], expected: int) -> None:
    """The read backs filter by ``_id`` alone, at most ``ROW_CHUNK`` ids each, and the server
    plans them on the ``_id`` index, examining only the rows named (not the history)."""
    finds = [cmd["filter"] for name, cmd in sent if name == "find"]
    assert finds and sum(len(named(f)) for f in finds) == expected
    for flt in finds:
        assert set(flt) == {"_id"} and len(named(flt)) <= ROW_CHUNK, flt
        plan = await w.db.command("explain", {"find": EFFECTS, "filter": flt},
                                  verbosity="executionStats")
        assert plan["executionStats"]["totalDocsExamined"] <= len(named(flt)), plan


async def test_a_lease_beat_over_more_than_a_chunk_goes_out_in_bounded_by_id_writes(
    wire: Wire,
) -> None:
    claims = await wire.rows(ROWS, claim=ClaimTerms(claim_id="c1", lease_until=1030.0))
    assert len(claims) == ROWS
    leases = Leases(outbox=wire.outbox, clock=wire.clock, lease_seconds=30.0,
                    max_execution_seconds=600.0)
    held = [Lease(c, 1000.0) for c in claims]
    wire.clock.advance(10.0)
    wire.statements.take()
    await leases.extend_many(held)
    sent = wire.statements.take()
    commands = updates(sent)
    assert len(commands) == math.ceil(ROWS / BEAT_CHUNK)  # one write per chunk, no more
    assert check_writes(commands) == ROWS
    for statements in commands:  # each fenced on the claim
        assert all(u["q"]["state"] == "claimed" and u["q"]["claim_id"] == "c1"
                   for u in statements)
    assert {x.until for x in held} == {1040.0} and not any(x.stopped for x in held)
    stored = await wire.db[EFFECTS].distinct("lease_until", {"claim_id": "c1"})
    assert stored == [1040.0]


async def test_done_marks_claims_reclaims_and_their_read_backs_are_bounded_and_chunked(
    wire: Wire,
) -> None:
    # a batch of done marks, one of them lost to another claimant: the read back runs too
    claims = await wire.rows(ROWS, claim=ClaimTerms(claim_id="c1", lease_until=1030.0))
    stolen = claims[7]
    await wire.db[EFFECTS].update_one({"_id": stolen.ref}, {"$set": {"claim_id": "other"}})
    wire.statements.take()
    t = tr.done(now=1001.0, outcome="ok")
    moved = await wire.outbox.apply_marks([tr.Mark(c.ref, c.claim_id, t) for c in claims])
    assert len(moved) == ROWS - 1 and stolen.ref not in moved
    sent = wire.statements.take()
    assert check_writes(updates(sent)) == ROWS
    await check_reads(wire, sent, ROWS)

    # a claim of more than a chunk of due rows, and its read back after a lost race
    await wire.rows(ROWS, tenant="p")
    wire.statements.take()
    got = await wire.outbox.claim_any(2000.0, 30.0, ROWS)
    assert len(got) == ROWS
    sent = wire.statements.take()
    assert check_writes(updates(sent)) == ROWS

    # those leases expire: the reclaim updates, reads back and records why, all by id
    wire.statements.take()
    back = await wire.outbox.reclaim_expired(5000.0, 30.0, ROWS)
    assert len(back) == ROWS and all(c.reclaimed for c in back)
    sent = wire.statements.take()
    writes = updates(sent)
    assert check_writes(writes) == 2 * ROWS  # the reclaim, then the lease_expired entries
    await check_reads(wire, [(n, c) for n, c in sent if n == "find" and "_id" in c["filter"]],
                      ROWS)


async def test_releasing_held_rows_reads_the_pending_index_and_writes_by_id(wire: Wire) -> None:
    """The held rows are found over the pending index alone (the state and the held range: a
    clause on ``waiting`` beside them once sent a planner to scan the collection); those whose
    pause is lifted are released by id, in chunks; those of a pause still on stay held."""
    for tenant, why in (("a", "tenant:a"), ("b", "tenant:b")):
        await wire.rows(ROW_CHUNK + 5, tenant=tenant, not_before=held_not_before(5.0))
        await wire.db[EFFECTS].update_many({"tenant_id": tenant}, {"$set": {"waiting": why}})
    wire.statements.take()
    assert await wire.outbox.release_held(3000.0, keep={"tenant:b"}) == ROW_CHUNK + 5
    sent = wire.statements.take()
    finds = [cmd["filter"] for name, cmd in sent if name == "find"]
    assert len(finds) == 1 and set(finds[0]) == {"state", "not_before"}
    plan = await wire.db.command("explain", {"find": EFFECTS, "filter": finds[0]},
                                 verbosity="executionStats")
    assert plan["executionStats"]["totalDocsExamined"] <= 2 * (ROW_CHUNK + 5)
    assert check_writes(updates(sent)) == ROW_CHUNK + 5
    assert await wire.db[EFFECTS].count_documents({"tenant_id": "b", "waiting": "tenant:b"}) == \
        ROW_CHUNK + 5
    assert await wire.db[EFFECTS].count_documents({"tenant_id": "a", "not_before": 5.0}) == \
        ROW_CHUNK + 5
