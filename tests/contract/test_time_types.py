"""Every rule that reads a row's time, with every time type a writer may store (int, BSON Int64,
float) and at every boundary instant, on every backend (issue 32 item 1).

One property per rule, not one test per slip: for each type and each offset around the boundary
(one second before, the exact instant, one second after) the rule's documented side is checked.
The rules (``tests/contract/test_boundaries.py`` states them):

- a pending row is due at ``not_before <= now``;
- a claimed row's lease has expired at ``lease_until <= now`` (the reclaim takes it);
- another owner's row may be stolen once ``created_at <= steal_before`` (its materialization,
  whatever its due time);
- a claimed lease is a lease up to exactly ``now + horizon`` (beyond: the stuck-row sweep);
- ``explain`` reads both as the claim and the reclaim do: a row due from its exact
  ``not_before`` waits its turn (before: not due), a lease ends at its exact ``lease_until``.

The times are whole seconds, so the int and Int64 forms hold the exact instant.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from bson.int64 import Int64

from board_outbox.engine.upkeep.explain import explain
from board_outbox.model.row_documents import LEASE_HORIZON_SECONDS
from tests.contract.test_boundaries import LEASE, raw_row
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio

TYPES: dict[str, Callable[[float], Any]] = {
    "int": lambda t: int(t), "Int64": lambda t: Int64(int(t)), "float": float}
OFFSETS = (-1, 0, 1)  # the boundary instant, one second either side
PARAMS = pytest.mark.parametrize("conv", list(TYPES.values()), ids=list(TYPES))


def _t0(kit: Kit) -> float:
    return float(math.floor(kit.clock.now()))


async def _pending_at_offsets(kit: Kit, conv: Callable[[float], Any], t0: float, tenant: str,
                              suffix: str) -> None:
    """One pending row per offset, tenant ``{tenant}{i}``, due at ``t0 + OFFSETS[i]``, stored
    as ``conv`` types it."""
    for i, off in enumerate(OFFSETS):
        await kit.insert_raw_row(raw_row(f"{tenant}{i}", f"{tenant}{i}/1{suffix}", 1,
                                         not_before=conv(t0 + off), created_at=conv(t0 - 100)))


@PARAMS
async def test_a_pending_row_is_due_exactly_from_its_not_before(
        kit: Kit, conv: Callable[[float], Any]) -> None:
    t0 = _t0(kit)
    await _pending_at_offsets(kit, conv, t0, "t", "")
    got = await kit.outbox.claim_any(t0, LEASE, 10)
    # due exactly when not_before <= now: the rows at t0 - 1 and t0, not the one at t0 + 1
    assert sorted(c.tenant_id for c in got) == [f"t{i}" for i, off in enumerate(OFFSETS) if off <= 0]


@PARAMS
async def test_a_claimed_lease_has_expired_exactly_at_its_lease_until(
        kit: Kit, conv: Callable[[float], Any]) -> None:
    t0 = _t0(kit)
    for i, off in enumerate(OFFSETS):
        await kit.insert_raw_row(raw_row(f"t{i}", f"t{i}/1", 1, not_before=conv(t0 - 100),
                                         state="claimed", lease_until=conv(t0 + off),
                                         claim_id="gone"))
    assert await kit.outbox.stuck_rows(t0, 10) == []  # every one of them is a lease
    got = await kit.outbox.reclaim_expired(t0, LEASE, 10)
    assert sorted(c.tenant_id for c in got) == [f"t{i}" for i, off in enumerate(OFFSETS) if off <= 0]
    assert all(c.reclaimed for c in got)
    # and no claim takes a row whose lease still holds
    assert await kit.outbox.claim_any(t0, LEASE, 10) == []


@PARAMS
async def test_another_owners_row_is_stealable_exactly_from_its_materialization(
        kit: Kit, conv: Callable[[float], Any]) -> None:
    """The steal cut-off reads ``created_at`` as stored, whatever its number type: an integer
    ``created_at`` read as 0 would make every foreign row stealable at once."""
    t0 = _t0(kit)
    cut = t0 - 30  # steal_before: rows materialized up to here may be stolen
    for i, off in enumerate(OFFSETS):
        # due long ago (not_before says nothing about stealing), materialized around the cut
        await kit.insert_raw_row(raw_row(f"b{i}", f"b{i}/1", 1, not_before=conv(t0 - 1000),
                                         created_at=conv(cut + off)))
    got = await kit.outbox.claim_any(t0, LEASE, 10, prefer={"a"}, steal_before=cut)
    assert sorted(c.tenant_id for c in got) == [f"b{i}" for i, off in enumerate(OFFSETS) if off <= 0]
    # the owner itself (no preference, or preferring them) takes the rest at once
    rest = await kit.outbox.claim_any(t0, LEASE, 10, prefer={"b2"}, steal_before=cut)
    assert [c.tenant_id for c in rest] == ["b2"]


@PARAMS
async def test_a_lease_is_a_lease_up_to_exactly_the_horizon(
        kit: Kit, conv: Callable[[float], Any]) -> None:
    t0 = _t0(kit)
    for i, off in enumerate(OFFSETS):
        await kit.insert_raw_row(raw_row(f"t{i}", f"t{i}/1", 1, not_before=conv(t0),
                                         state="claimed", claim_id="x",
                                         lease_until=conv(t0 + LEASE_HORIZON_SECONDS + off)))
    stuck = await kit.outbox.stuck_rows(t0, 10)
    assert sorted(doc["tenant_id"] for _, doc in stuck) == [
        f"t{i}" for i, off in enumerate(OFFSETS) if off > 0]


@PARAMS
async def test_explain_reads_due_and_expired_exactly_as_the_claims_do(
        kit: Kit, conv: Callable[[float], Any]) -> None:
    t0 = _t0(kit)
    await _pending_at_offsets(kit, conv, t0, "p", "/sub/s")
    for i, off in enumerate(OFFSETS):
        await kit.insert_raw_row(raw_row(f"c{i}", f"c{i}/1/sub/s", 1, not_before=conv(t0 - 100),
                                         state="claimed", lease_until=conv(t0 + off),
                                         claim_id="k"))
    for i, off in enumerate(OFFSETS):
        pending = {h.name for h in (await explain(kit.stores, f"p{i}/1/sub/s", t0)).holds}
        # due exactly when not_before <= now: its turn; else not due (no error: no backoff)
        assert pending & {"turn", "not_due", "backoff"} == ({"not_due"} if off > 0 else {"turn"})
        claimed = [h.name for h in (await explain(kit.stores, f"c{i}/1/sub/s", t0)).holds]
        # a lease has ended exactly when lease_until <= now (the reclaim takes it then)
        assert claimed == (["lease"] if off > 0 else ["expired_lease"])


# --- the stored-time range (R7) -----------------------------------------------------------------

EDGES = {  # a stored time at each end of the range, and just past it
    "epoch": (0.0, True), "before-epoch": (-1.0, False),
    "year-9999-end": (253402300799.0, True), "past-year-9999": (253402300800.0, False),
}


@PARAMS
async def test_a_stored_time_decodes_exactly_inside_the_range(
        kit: Kit, conv: Callable[[float], Any]) -> None:
    """Each time field of a row, at each end of the range and one second past it, with every
    number type: inside, the row decodes; past either end, it is malformed -- that row alone
    (a listing beside it reads the others), with the field and the range named."""
    from board_outbox.model.codec import unreadable
    from board_outbox.model.errors import MalformedDocument
    from board_outbox.model.records import RowFilter

    fields = ("not_before", "created_at", "updated_at", "materialized_at", "burst_at")
    seq = 0
    expect: dict[str, bool] = {}
    for name in fields:
        for edge, (t, ok) in EDGES.items():
            seq += 1
            key = f"r{seq}/1/sub/s"
            doc = raw_row(f"r{seq}", key, 1, not_before=conv(1000.0), state="failed")
            doc[name] = conv(t)
            await kit.insert_raw_row(doc)
            expect[key] = ok
            if ok:
                got = await kit.outbox.get(key)
                assert got is not None and getattr(got, name) == t, (name, edge)
            else:
                with pytest.raises(MalformedDocument, match=f"{name} .* is out of range"):
                    await kit.outbox.get(key)
    with unreadable() as bad:
        listed = await kit.outbox.find(RowFilter(states=("failed",), limit=1000))
    assert {r.row_key for r in listed} == {k for k, ok in expect.items() if ok}
    assert {e.ref for e in bad} == {k for k, ok in expect.items() if not ok}


@PARAMS
async def test_a_pending_row_is_swept_exactly_past_the_furthest_due_time_a_writer_sets(
        kit: Kit, conv: Callable[[float], Any]) -> None:
    """R7: a pending row due up to ``due_limit(now)`` (a pause's offset and two days ahead) is
    one a writer of ours may have left -- a held row -- and is no stuck row; one second further
    it can be no writer's, and the stuck-row sweep parks it."""
    from board_outbox.model.times import due_limit

    t0 = _t0(kit)
    limit = float(math.floor(due_limit(t0)))
    for i, off in enumerate(OFFSETS):
        await kit.insert_raw_row(raw_row(f"d{i}", f"d{i}/1/sub/s", 1,
                                         not_before=conv(limit + off), created_at=conv(t0)))
    stuck = await kit.outbox.stuck_rows(limit - due_limit(0.0), 10)
    assert sorted(doc["tenant_id"] for _, doc in stuck) == [
        f"d{i}" for i, off in enumerate(OFFSETS) if off > 0]
