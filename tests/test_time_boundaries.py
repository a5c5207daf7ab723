"""The service's own documents at their boundaries, with every number type a writer may store
(int, BSON Int64, float), on the memory twins, the Mongo adapters (mongomock) and the wire
(issue 32 item 1). One property per rule:

- a membership lease is trusted up to exactly ``heartbeat_timeout_seconds`` ahead of now
  (``expires_at <= now + timeout``; one second further it is not a heartbeat's lease);
- a cursor ahead of its counter holds its tenant from exactly one ahead (``cursor > counter``);
  a cursor at its counter, or behind, does not. A cursor or counter that is not a true integer
  is a bad document, reported, and holds nothing.

The rows' times (due, lease, steal, horizon) are ``tests/contract/test_time_types.py``.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from bson import Decimal128
from bson.int64 import Int64

from board_outbox.model.subscriptions import Subscription
from tests.test_bad_data import SIDES, _uniq, open_side

pytestmark = pytest.mark.anyio

TYPES: dict[str, Callable[[float], Any]] = {
    "int": lambda t: int(t), "Int64": lambda t: Int64(int(t)), "float": float}
INT_TYPES = {k: v for k, v in TYPES.items() if k != "float"}


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("conv", list(TYPES.values()), ids=list(TYPES))
async def test_a_membership_lease_is_trusted_up_to_exactly_the_heartbeat_timeout(
        side: str, conv: Callable[[float], Any], request: pytest.FixtureRequest) -> None:
    from board_outbox.engine.flow.membership import MembershipSettings, Ownership
    from board_outbox.model.bad_documents import BAD_DOCUMENTS
    from board_outbox.model.clock import ManualClock

    timeout = 10.0
    clock = ManualClock(float(math.floor(ManualClock().now())))
    async with open_side(side, request) as s:
        ahead = {off: _uniq(f"m{off}") for off in (-1, 0, 1)}
        for off, member in ahead.items():
            await s.member(member, conv(clock.now() + timeout + off))
        me = Ownership(s.stores.members, clock, member_id="me",
                       settings=MembershipSettings(heartbeat_timeout_seconds=timeout))
        await me.beat()
        assert set(me.members) == {"me", ahead[-1], ahead[0]}  # up to exactly the timeout
        listed = {d.key for d in BAD_DOCUMENTS.current() if d.collection == "board_outbox_members"}
        assert ahead[1] in listed and ahead[0] not in listed and ahead[-1] not in listed


async def _held(s: Any, clock: Any) -> dict[str, tuple[int, int]]:
    from board_outbox.service.config import load_config
    from board_outbox.service.runtime import Service

    config = load_config(env={}, projections=[], tail={"seed": "earliest"})
    service = Service(s.stores, config, clock=clock, rng=random.Random(1))
    await service.tail.behind()
    return dict(service.tail.cursor_ahead)


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("conv", list(INT_TYPES.values()), ids=list(INT_TYPES))
async def test_a_cursor_holds_its_tenant_from_exactly_one_ahead_of_its_counter(
        side: str, conv: Callable[[float], Any], request: pytest.FixtureRequest) -> None:
    from board_outbox.model.clock import ManualClock

    async with open_side(side, request) as s:
        tenants = {off: _uniq(f"c{off}") for off in (-1, 0, 1, 2)}
        for off, t in tenants.items():
            await s.stores.subs.put(Subscription(sub_id=f"{t}-s", tenant_id=t, bot="b"))
            await s.counter(t, conv(5))
            await s.cursor(t, conv(5 + off))
        held = await _held(s, ManualClock())
        assert held == {tenants[1]: (6, 5), tenants[2]: (7, 5)}


@pytest.mark.parametrize("side", SIDES)
async def test_a_float_or_negative_cursor_holds_nothing_and_is_listed_as_bad(
        side: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture) -> None:
    """6.0 is not an integer seq (the counter is a BSON long): neither a hold nor a drain may
    read it as 6; -1 is no seq either. Each is one listed bad document."""
    from board_outbox.model.bad_documents import BAD_DOCUMENTS
    from board_outbox.model.clock import ManualClock

    async with open_side(side, request) as s:
        bad = {"float": (_uniq("f"), 6.0), "negative": (_uniq("n"), -1)}
        for t, value in bad.values():
            await s.stores.subs.put(Subscription(sub_id=f"{t}-s", tenant_id=t, bot="b"))
            await s.counter(t, 5)
            await s.cursor(t, value)
        caplog.set_level(logging.WARNING, logger="board_outbox")
        assert await _held(s, ManualClock()) == {}
        listed = {d.key: d.problem for d in BAD_DOCUMENTS.current()
                  if d.collection == "trigger_cursors"}
        for t, value in bad.values():
            assert f"seq {value!r} is not an integer seq" == listed.get(t), listed


@pytest.mark.parametrize("side", SIDES)
async def test_a_fixed_document_is_no_longer_listed_as_bad(
        side: str, request: pytest.FixtureRequest) -> None:
    """The bad-document listing is what is bad now: a cursor, a counter or a membership lease
    fixed by hand leaves it at the next read (and a relapse is listed again)."""
    from board_outbox.engine.flow.membership import MembershipSettings, Ownership
    from board_outbox.model.bad_documents import BAD_DOCUMENTS
    from board_outbox.model.clock import ManualClock

    def listed(collection: str) -> set[str]:
        return {d.key for d in BAD_DOCUMENTS.current() if d.collection == collection}

    clock = ManualClock()
    async with open_side(side, request) as s:
        cur, cnt, member = _uniq("cur"), _uniq("cnt"), _uniq("member")
        await s.cursor(cur, 2.5)
        await s.counter(cnt, "lots")
        await s.member(member, "soon")
        me = Ownership(s.stores.members, clock, member_id="me",
                       settings=MembershipSettings(heartbeat_timeout_seconds=10.0))
        await s.stores.cursors.all()
        await s.stores.events.heads()
        await me.beat()
        assert cur in listed("trigger_cursors") and cnt in listed("board_event_counters")
        assert member in listed("board_outbox_members")
        await s.stores.cursors.put(cur, 1)
        await s.counter(cnt, 3) if s.backend is not None else await s.db[
            "board_event_counters"].update_one({"_id": cnt}, {"$set": {"seq": 3}})
        if s.backend is not None:
            await s.member(member, clock.now() + 5)
        else:
            await s.db["board_outbox_members"].update_one(
                {"_id": member}, {"$set": {"expires_at": clock.now() + 5}})
        assert (await s.stores.cursors.all())[cur] == 1
        assert (await s.stores.events.heads())[cnt] == 3
        await me.beat()
        assert member in me.members
        assert cur not in listed("trigger_cursors")
        assert cnt not in listed("board_event_counters")
        assert member not in listed("board_outbox_members")
        await s.cursor(cur, -4)  # a relapse is listed again
        await s.stores.cursors.all()
        assert cur in listed("trigger_cursors")


# --- the stored-time range (R7): the one check, the one formatter ------------------------------

INSIDE = [0, 0.0, Int64(1_800_000_000), 1_800_000_000.5, 253402300799, 253402300799.0]
OUTSIDE = [-1, -0.001, 253402300800, float("inf"), float("-inf"), float("nan"), 1e12, 1e20,
           -1e15, -1e308, 2**62 + 1, 10**400, True, "1e9", None, Decimal128("1")]


@pytest.mark.parametrize("value", INSIDE, ids=repr)
async def test_a_time_inside_the_range_is_a_time_and_is_shown(value: object) -> None:
    from board_outbox.model.times import ago, stamp, time_problem, when

    assert stamp(value) == float(value)  # type: ignore[arg-type]
    assert time_problem("at", value) is None
    assert when(value).endswith(" UTC") and "out of range" not in when(value)
    assert ago(float(value), value) == 0.0  # type: ignore[arg-type]


@pytest.mark.parametrize("value", OUTSIDE, ids=repr)
async def test_a_value_outside_the_range_is_no_time_and_is_shown_as_it_is(value: object) -> None:
    """Every formatter's helper: written as what it is, never raised (``fromtimestamp`` raised
    ValueError at 1e12 and OverflowError at 1e20 or an infinity, and took a page down)."""
    from board_outbox.model.times import ago, stamp, time_problem, when
    from board_outbox.surface.format import age

    assert stamp(value) is None and ago(1e9, value) is None
    problem = time_problem("at", value)
    assert problem is not None and problem.startswith("at ") and "1970-01-01" in problem
    assert len(problem) < 200  # 10**400 is not written out
    shown = when(value)
    assert shown == "-" if value is None else shown.startswith("out of range: ")
    assert age(float("inf")) == age(float("nan")) == "?"


async def test_a_millisecond_timestamp_is_named_as_one() -> None:
    from board_outbox.model.times import time_problem

    assert "a millisecond timestamp?" in (time_problem("at", 1.8e12) or "")
    assert "a millisecond timestamp?" not in (time_problem("at", 1e20) or "")


async def test_a_time_is_written_to_the_millisecond_when_asked() -> None:
    from board_outbox.model.times import when

    assert when(1_800_000_000.1234, fmt="%Y-%m-%d %H:%M:%S.%f", ms=True) == "2027-01-15 08:00:00.123"
    assert when(None, none="never") == "never"


async def test_the_board_time_out_of_range_reads_as_none_and_the_event_is_reported_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """An event's ``at`` is only read: out of the range it is no time (0, as a board that gives
    none), and the event is listed once as a bad ``board_events`` document -- it still decodes,
    so it runs. A row's copy of it reads the same."""
    from board_outbox.model.bad_documents import BAD_DOCUMENTS
    from board_outbox.model.board import BoardEvent
    from board_outbox.model.codec import from_doc
    from board_outbox.model.errors import MalformedEvent, MalformedRow
    from board_outbox.model.rows import EffectRow

    t = _uniq("ev")
    caplog.set_level(logging.WARNING, logger="board_outbox")
    for _ in range(2):
        ev = from_doc({"tenant_id": t, "seq": 4, "type": "card.created", "card_id": "c",
                       "at": 1e12}, BoardEvent, MalformedEvent)
        assert ev.at == 0.0
    assert len([r for r in caplog.records if t in r.getMessage()]) == 1
    assert any(d.collection == "board_events" and d.key == f"{t}/4"
               and "read as no time (the event runs)" in d.problem for d in BAD_DOCUMENTS.current())
    row = from_doc({"tenant_id": t, "row_key": f"{t}/4/sub/s", "seq": 4,
                    "event": {"seq": 4, "type": "card.created", "card_id": "c", "at": -1e308}},
                   EffectRow, MalformedRow)
    assert row.event is not None and row.event.at == 0.0
    BAD_DOCUMENTS.resolved("board_events", f"{t}/4")


async def test_a_parked_row_keeps_the_error_entries_that_decode() -> None:
    """A row parked for one error entry dated in milliseconds keeps its other entries (the
    history once went whole), then the park's own entry; the parked document decodes."""
    from board_outbox.model.codec import from_doc
    from board_outbox.model.errors import MalformedRow
    from board_outbox.model.row_documents import park_fields
    from board_outbox.model.rows import EffectRow

    doc = {"tenant_id": "t", "row_key": "t/1/sub/s", "seq": 1, "state": "pending",
           "errors": [{"attempt": 1, "at": 5.0, "error": "first"},
                      {"attempt": 2, "at": 1e12, "error": "second"},
                      {"attempt": 3, "at": 6.0, "error": "third"}],
           "audit": [{"at": float("inf"), "action": "replay"}, {"at": 7.0, "action": "replay"}]}
    fixed = park_fields(doc, now=100.0, error="malformed row")
    assert [e["error"] for e in fixed["errors"]] == [
        "first", "third", "malformed row (repaired: errors: 1 of 3 entries dropped, [{'attempt': "
        "2, 'at': 1000000000000.0, 'error': 'second'}]; audit: 1 of 2 entries dropped, [{'at': "
        "inf, 'action': 'replay'}])"]
    assert [a["at"] for a in fixed["audit"]] == [7.0]
    from_doc({**doc, **fixed}, EffectRow, MalformedRow)  # decodes now


async def test_an_operators_time_bound_is_held_to_the_range() -> None:
    from board_outbox.surface.admin import parse_when

    assert parse_when("1800000000") == 1_800_000_000.0
    for text in ("1e20", "-5", "99999999d", "1e12"):
        with pytest.raises(ValueError, match="is not a time from 1970-01-01 to 9999-12-31 UTC"):
            parse_when(text, now=1_800_000_000.0)


async def test_a_series_minute_out_of_range_is_a_bad_document() -> None:
    from board_outbox.model.series import series_problem

    got = series_problem({"minute": 60 * 10**10, "replica": "r", "counts": {}})
    assert isinstance(got, str) and "minute 600000000000 is out of range" in got


async def test_the_production_client_decodes_a_date_past_9999_per_document() -> None:
    """SecantusDB refuses to store such a date, so this is checked on the client's own codec:
    with the driver's default a BSON date past year 9999 raised while decoding the whole reply
    (every row of the read lost); with ``DATETIME_AUTO`` it decodes as ``DatetimeMS``, and only
    its own row is malformed."""
    import bson
    from bson.datetime_ms import DatetimeMS

    from board_outbox.adapters.mongo.client import make_client
    from board_outbox.model.codec import from_doc
    from board_outbox.model.errors import MalformedRow
    from board_outbox.model.rows import EffectRow

    client = make_client("mongodb://127.0.0.1:1/?directConnection=true")
    try:
        opts = client.codec_options
    finally:
        await client.close()
    good = {"tenant_id": "t", "row_key": "t/1/sub/s", "seq": 1, "state": "done",
            "done_at": DatetimeMS(1_800_000_000_000)}
    bad = {**good, "row_key": "t/2/sub/s", "seq": 2, "done_at": DatetimeMS(10**16)}
    reply = [bson.decode(bson.encode(d), codec_options=opts) for d in (good, bad)]
    assert from_doc(reply[0], EffectRow, MalformedRow).done_at is not None
    with pytest.raises(MalformedRow, match="done_at"):
        from_doc(reply[1], EffectRow, MalformedRow)
    with pytest.raises(bson.errors.InvalidBSON):  # the driver's default, for the record
        bson.decode(bson.encode(bad), codec_options=opts.with_options(
            datetime_conversion=bson.codec_options.DatetimeConversion.DATETIME))


async def test_a_filter_bound_out_of_range_is_one_line_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``replay --filter since=1e20 --dry-run`` raised OverflowError writing the plan's filter
    back; now it is refused before the store is opened."""
    from board_outbox.surface.cli import main

    def never(cfg: object, *, ensure_schema: bool = False) -> object:
        raise AssertionError("the store was opened for a bad filter")

    code = await anyio.to_thread.run_sync(lambda: main(
        ["dead-letters", "replay", "--filter", "since=1e20", "--dry-run"], factory=never))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "is not a time from 1970-01-01" in err
