"""``board_outbox.testing``, the shipped projection contract checks (issue 19, item 5): they pass
a projection that keeps the contract and FAIL each deliberately broken one, naming the property."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import pytest

from board_outbox.sdk import EventSnapshot, ReadModelStore, UpsertIfNewer
from board_outbox.testing import (
    PROPERTIES,
    ProjectionContract,
    ProjectionContractError,
    check_projection,
    contract_events,
)
from tests.support.user_plugins import TitleLog

pytestmark = pytest.mark.anyio


class Counter:
    """Not idempotent: counts the events applied per card (a repeat counts twice)."""

    name: ClassVar[str] = "counter"

    def __init__(self, store: ReadModelStore) -> None:
        self.store = store

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        doc = await self.store.get(self.name, tenant_id, event.card_id)
        n = int(doc["n"]) + 1 if doc else 1
        await self.store.upsert_if_newer(self.name, tenant_id, event.card_id, n, {"n": n})
        return "counted"

    async def reset(self, tenant_id: str) -> None:
        await self.store.reset(self.name, tenant_id)


class FirstWins(TitleLog):
    """Idempotent but order-dependent: the first event applied to a card wins (no seq guard)."""

    name: ClassVar[str] = "first-wins"

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        await self.store.upsert_if_newer(self.name, tenant_id, event.card_id, 0,
                                         {"title": event.title, "seq": event.seq})
        return "ok"

    async def apply_many(self, tenant_id: str, events: Sequence[EventSnapshot]) -> list[str]:
        return [await self.apply(tenant_id, e) for e in events]


class ForgetfulReset(TitleLog):
    """Its reset deletes nothing."""

    name: ClassVar[str] = "forgetful-reset"

    async def reset(self, tenant_id: str) -> None:
        return None


class ShortBatch(TitleLog):
    """apply_many writes only the batch's first event (and says so for one event only)."""

    name: ClassVar[str] = "short-batch"

    async def apply_many(self, tenant_id: str, events: Sequence[EventSnapshot]) -> list[str]:
        e = events[0]
        await self.store.write_many(self.name, tenant_id, [
            UpsertIfNewer(key=e.card_id, seq=e.seq, doc={"title": e.title, "by": e.actor})])
        return ["titled"]


class Silent(TitleLog):
    """Writes nothing at all (or into a model the check was not told about)."""

    name: ClassVar[str] = "silent"

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        return "nothing"


async def test_a_projection_that_keeps_the_contract_passes_every_property() -> None:
    await check_projection(TitleLog)
    for prop in PROPERTIES:
        await check_projection(TitleLog, only=[prop], seed=7)


@pytest.mark.parametrize(("broken", "prop", "passes"), [
    (Counter, "idempotent", ["reset", "apply_many"]),  # no apply_many: nothing to check there
    (FirstWins, "order", ["idempotent", "reset"]),
    (ForgetfulReset, "reset", ["idempotent", "order", "apply_many"]),
    (ShortBatch, "apply_many", ["idempotent", "order", "reset"]),
])
async def test_the_helper_fails_a_broken_projection_naming_the_property(
    broken: type, prop: str, passes: list[str]
) -> None:
    with pytest.raises(ProjectionContractError, match=f"breaks '{prop}'") as exc:
        await check_projection(broken)
    assert f"'{broken.name}'" in str(exc.value)  # type: ignore[attr-defined]
    with pytest.raises(ProjectionContractError, match=f"breaks '{prop}'"):
        await check_projection(broken, only=[prop])
    # the properties it keeps pass: each check tests what it says, not everything at once
    await check_projection(broken, only=passes)


async def test_a_projection_that_writes_nothing_is_not_a_pass() -> None:
    with pytest.raises(ProjectionContractError, match="wrote nothing"):
        await check_projection(Silent)


async def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown contract properties"):
        await check_projection(TitleLog, only=["fast"])
    with pytest.raises(ValueError, match="at least two events"):
        await check_projection(TitleLog, events=contract_events(1))


def test_the_event_stream_is_varied() -> None:
    evs = contract_events()
    assert [e.seq for e in evs] == list(range(1, 25))
    assert {e.type for e in evs} >= {"card.created", "card.moved", "card.labeled", "card.deleted"}
    assert len({e.card_id for e in evs}) == 4 and any(e.deleted for e in evs)


class BrokenContract(ProjectionContract):  # not collected (no Test prefix): run by hand below
    projection = Counter


def test_the_contract_class_fails_a_broken_projection_and_skips_a_missing_apply_many() -> None:
    import unittest

    with pytest.raises(ProjectionContractError, match="breaks 'idempotent'"):
        BrokenContract().test_idempotent()
    with pytest.raises(unittest.SkipTest):
        BrokenContract().test_apply_many_equals_apply_one_by_one()


class TestTitleLogContract(ProjectionContract):
    projection = TitleLog
