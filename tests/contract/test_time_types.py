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

from board_outbox.engine.explain import explain
from board_outbox.model.validation import LEASE_HORIZON_SECONDS
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
