"""The fault-injection harness (SPEC B2): bounded in CI, and proven able to fail."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from board_outbox.memory.outbox import MemoryEffectOutbox
from tests.harness.broken import CursorFirstTail
from tests.harness.sim import recorded_schedule, run_choices, run_many, shrink

choices = st.lists(st.integers(0, 2**16), min_size=20, max_size=250)


def test_200_schedules_hold_every_invariant() -> None:
    """With the lease heartbeat (O4) simulated, no lease expires between a launch and its mark:
    the 10,000-schedule run has 0 such doubles (was 353)."""
    rep = run_many(200)
    assert rep.violations == []
    assert rep.schedules == 200
    for kind in ("transient", "crash_before", "crash_after"):
        assert rep.faults[kind] > 50, rep.faults  # faults really were injected
    assert all(rep.env[a] > 0 for a in ("emit", "emit_slow", "jump", "edit_sub", "delete_sub",
                                         "delete_card", "poison", "outage"))
    assert rep.dead_letters > 0  # the outages really exhaust attempt budgets
    assert rep.launches > 100 and rep.rows > rep.launches
    assert rep.residual["double launch: lease expired between launch and mark_done"] == 0
    assert rep.faults["heartbeat beat failed"] > 0  # beats fail too, and the lease rides it out


def test_without_the_heartbeat_the_residual_window_is_visited(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.harness import sim

    monkeypatch.setattr(sim, "HEARTBEAT", False)
    rep = run_many(100)
    assert rep.violations == []
    doubles = sum(n for k, n in rep.residual.items() if k.startswith("double launch"))
    assert doubles > 0  # the residual window is really visited, and reported apart


def test_harness_catches_the_cursor_first_shape() -> None:
    rep = run_many(40, tail_cls=CursorFirstTail)
    assert any("cursor passed" in v and "without a row" in v for v in rep.violations)


def test_harness_catches_unfenced_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    def unfenced(self: MemoryEffectOutbox, ref: object, claim_id: str) -> object:
        return self._docs.get(ref)  # type: ignore[call-overload]

    from tests.harness import sim

    monkeypatch.setattr(MemoryEffectOutbox, "_fenced", unfenced)
    monkeypatch.setattr(sim, "HEARTBEAT", False)  # leases must be stolen for fencing to matter
    rep = run_many(60)
    assert any("outside the residual window" in v or "without a launch" in v
               for v in rep.violations), rep.violations[:5]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(choices)
def test_hypothesis_schedules_hold_every_invariant(cs: list[int]) -> None:
    rep = run_choices(cs, trace=True)
    assert rep.violations == [], "\n".join(rep.trace + rep.violations)


def test_a_failing_schedule_shrinks_to_a_readable_step_list() -> None:
    """A seeded schedule breaks the cursor-first pipeline; shrinking its recorded choices
    leaves a few readable steps that still lose events."""
    seed = next(i for i in range(50) if run_many(1, first_seed=i, tail_cls=CursorFirstTail).violations)
    rep, recorded = recorded_schedule(seed, tail_cls=CursorFirstTail)
    assert rep.violations

    def fails(cs: list[int]) -> bool:
        return bool(run_choices(cs, tail_cls=CursorFirstTail).violations)

    assert fails(recorded)  # the recording replays the same schedule
    minimal = shrink(recorded, fails)
    rep = run_choices(minimal, trace=True, tail_cls=CursorFirstTail)
    print("minimal failing schedule:\n" + "\n".join(rep.trace + rep.violations))
    assert rep.violations and len(minimal) < len(recorded) // 4
    assert len(rep.trace) <= 12 and any("emit" in line for line in rep.trace)
    assert any("cursor passed" in v for v in rep.violations)


def test_schedules_over_the_mongo_adapters_hold_every_invariant() -> None:
    """The same simulation with the Mongo adapters (pymongo API over mongomock) as the store."""
    rep = run_many(40, store="mongomock")
    assert rep.violations == []
    assert sum(rep.faults.values()) > 50 and rep.launches > 20
