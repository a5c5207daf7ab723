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

import pytest
from bson.int64 import Int64

from board_outbox.model.domain import Subscription
from tests.test_bad_data import SIDES, _uniq, open_side

pytestmark = pytest.mark.anyio

TYPES: dict[str, Callable[[float], Any]] = {
    "int": lambda t: int(t), "Int64": lambda t: Int64(int(t)), "float": float}
INT_TYPES = {k: v for k, v in TYPES.items() if k != "float"}


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("conv", list(TYPES.values()), ids=list(TYPES))
async def test_a_membership_lease_is_trusted_up_to_exactly_the_heartbeat_timeout(
        side: str, conv: Callable[[float], Any], request: pytest.FixtureRequest) -> None:
    from board_outbox.engine.membership import MembershipSettings, Ownership
    from board_outbox.model.clock import ManualClock
    from board_outbox.model.validation import BAD_DOCUMENTS

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
    from board_outbox.model.clock import ManualClock
    from board_outbox.model.validation import BAD_DOCUMENTS

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
    from board_outbox.engine.membership import MembershipSettings, Ownership
    from board_outbox.model.clock import ManualClock
    from board_outbox.model.validation import BAD_DOCUMENTS

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
