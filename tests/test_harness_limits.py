"""The launch gate's limits (F2) in the fault-injection harness (``tests/harness/limits.py``):
the schedules hold every limit invariant on both stores, the checks were really exercised, and
each invariant fires against a gate (or a store) broken in the one way it guards."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import msgspec
import pytest

from board_outbox.adapters.memory.limits import MemoryLimitStore
from board_outbox.engine.flow import leases, limits
from board_outbox.engine.flow.limits import LaunchGate
from board_outbox.model import transitions
from tests.harness.sim import VIOLATION_KINDS, run_many, violation_kinds

KINDS = ("over-limit", "deferral-attempt", "slot-leaked", "needless-deferral", "over-rate",
         "slot-lifetime", "slot-fence")


def _caught(violations: list[str], kind: str) -> None:
    assert kind in VIOLATION_KINDS
    kinds = violation_kinds(violations)
    assert kinds[kind] > 0, (kind, kinds, violations[:5])


# the mongomock run's seeds: a window where a tenant's two in-flight slots get refused (rare:
# 4 schedules in 48 there)
@pytest.mark.parametrize(("store", "n", "first"), [("memory", 120, 0), ("mongomock", 16, 24)])
def test_schedules_hold_every_limit_invariant(store: str, n: int, first: int) -> None:
    rep = run_many(n, first_seed=first, store=store, stop_at_first=True)
    assert rep.violations == [], rep.violations[:5]
    assert all(k in VIOLATION_KINDS for k in KINDS)
    c = rep.covered
    # launches counted in flight, at the tenant's limit; refusals at each limit and the rate
    assert c["launches counted in flight"] > 100 and c["launches at the tenant's in-flight limit"] > 0
    assert c["launches refused at the bot in-flight limit"] > 0
    assert c["launches refused at the tenant in-flight limit"] > 0
    assert c["launches refused at a rate"] > 0
    assert c["deferrals checked"] > 0 and c["deferrals checked"] == c["rows deferred by a limit"]
    # slots renewed by the beats, released, a few left to end after a crash; bounds fired
    assert c["slots renewed by a beat"] > 0 and c["slots released"] > 0
    assert c["launches cut at their slot's end"] > 0
    assert rep.faults["hard stop"] > 0
    if store == "memory":  # rarer paths: enough schedules to see them on one store
        assert c["slots left to end on their own (crash or refused release)"] > 0
        assert c["launches cut before they reached the runner"] > 0


def _with_settings(monkeypatch: pytest.MonkeyPatch, **changes: Any) -> None:
    """Every gate holds with these settings instead of its own."""
    hold = LaunchGate.hold

    def broken(self: LaunchGate, *args: Any, **kwargs: Any) -> AbstractAsyncContextManager[None]:
        gate = LaunchGate(self.store, msgspec.structs.replace(self.settings, **changes))
        return hold(gate, *args, **kwargs)

    monkeypatch.setattr(LaunchGate, "hold", broken)


def test_a_gate_that_skips_the_in_flight_check_runs_over_the_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _with_settings(monkeypatch, bot_in_flight=0, tenant_in_flight=0)
    _caught(run_many(30).violations, "over-limit")


def test_a_deferral_that_counts_an_attempt_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    defer = transitions.defer

    def counting(**kwargs: Any) -> transitions.Transition:
        return msgspec.structs.replace(defer(**kwargs), count_attempt=True)

    monkeypatch.setattr(transitions, "defer", counting)
    _caught(run_many(20).violations, "deferral-attempt")


def test_a_gate_that_never_releases_leaks_its_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    async def keep(self: LaunchGate, keys: list[str], holder: str) -> None:
        await anyio.lowlevel.checkpoint()

    monkeypatch.setattr(LaunchGate, "_release", keep)
    _caught(run_many(10).violations, "slot-leaked")


def test_an_unshielded_release_leaks_its_slots_at_a_hard_stop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The release as it was before the shield: a hard stop mid-launch cancels it."""
    async def unshielded(self: LaunchGate, keys: list[str], holder: str) -> None:
        for key in keys:
            await self.store.release(key, holder)

    monkeypatch.setattr(LaunchGate, "_release", unshielded)
    rep = run_many(60)
    _caught(rep.violations, "slot-leaked")
    assert all("[slot-leaked]" in v for v in rep.violations), rep.violations[:5]


def test_a_bot_keyed_without_its_tenant_defers_needlessly(monkeypatch: pytest.MonkeyPatch) -> None:
    """One tenant's launches of a bot hold up another tenant's bot of the same name."""
    monkeypatch.setattr(limits, "bot_key", lambda tenant_id, bot: f"bot:{bot}")
    _caught(run_many(30).violations, "needless-deferral")


def test_a_ghost_slot_held_for_ever_defers_needlessly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted ghost (a slot ending a month on) is taken as held, not taken over."""
    from board_outbox.adapters.memory import limits as memory_limits

    def held_unless_ended(doc: dict[str, Any], holder: str, now: float) -> bool:
        until = doc.get("until")
        return doc.get("holder") in (None, holder) or not isinstance(until, float) or until <= now

    monkeypatch.setattr(memory_limits, "slot_is_free", held_unless_ended)
    _caught(run_many(10).violations, "needless-deferral")


def test_a_rate_without_a_cap_lets_too_many_through(monkeypatch: pytest.MonkeyPatch) -> None:
    async def uncapped(self: MemoryLimitStore, key: str, per_second: float, now: float) -> bool:
        await anyio.lowlevel.checkpoint()
        return True

    monkeypatch.setattr(MemoryLimitStore, "take", uncapped)
    _caught(run_many(30).violations, "over-rate")


def test_a_bound_that_is_not_pushed_on_cuts_a_renewed_launch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    renew = LaunchGate._renew

    async def stuck(self: LaunchGate, slots: Any, clock: Any) -> None:
        deadline = slots.scope.deadline
        await renew(self, slots, clock)
        slots.scope.deadline = deadline  # the slots are renewed, the bound is not

    monkeypatch.setattr(LaunchGate, "_renew", stuck)
    _caught(run_many(30).violations, "slot-lifetime")


def test_a_beat_that_does_not_renew_the_slots_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_riders(self: leases.Leases, batch: Any) -> None:
        await self._extend(batch)  # the leases move on; what rides on them does not

    monkeypatch.setattr(leases.Leases, "extend_many", no_riders)
    _caught(run_many(20).violations, "slot-lifetime")


def test_a_renew_that_writes_other_holders_slots_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def unfenced(self: MemoryLimitStore, key: str, holder: str, until: float) -> bool:
        await anyio.lowlevel.checkpoint()
        docs = [d for d in self._docs.values() if d.get("key") == key]
        for doc in docs:
            doc["until"] = until
        return bool(docs)

    monkeypatch.setattr(MemoryLimitStore, "renew", unfenced)
    _caught(run_many(30).violations, "slot-fence")

