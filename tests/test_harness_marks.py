"""The harness's invariants of the effect's mark and the leases behind it
(``tests/harness/marks.py``): clean over the real pipeline on both stores, and each one broken
once, on purpose, and reported with its own kind -- or it proves nothing.

Each break is of one mechanism: the closing flush of a batch cancelled at shutdown left
unshielded (``effect-unmarked``); an insert that adopts any claimed row it meets, another
replica's included (``stale-claim``); a hand-off whose beats leave its waiting rows out
(``handoff-lapsed``); a beat that renews what rides on a lease it found lost
(``slot-after-lost-lease``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from board_outbox.adapters.memory.outbox import MemoryEffectOutbox
from board_outbox.engine.flow.leases import Leases
from board_outbox.engine.work.completer import Completer
from board_outbox.engine.work.handoff import HandoffQueue
from board_outbox.model.rows import EffectRow
from board_outbox.ports import ClaimTerms, UpsertResult
from tests.harness.sim import VIOLATION_KINDS, run_many, violation_kinds

KINDS = ("effect-unmarked", "stale-claim", "handoff-lapsed", "slot-after-lost-lease")


def _caught(violations: list[str], kind: str) -> None:
    assert kind in VIOLATION_KINDS
    kinds = violation_kinds(violations)
    assert kinds[kind] > 0, (kind, kinds, violations[:5])


def test_the_marks_and_leases_hold_over_both_stores() -> None:
    """Over the real pipeline (the clean runs of ``test_harness.py`` check these too): the
    invariants are met and what they watch was really driven -- launches and staged rows
    followed to their marks, fenced writes checked, handed leases watched, replicas stalled
    past their leases, bulk marks outlasting the original lease."""
    rep = run_many(30, first_seed=500, stop_at_first=True)
    rep.add(run_many(5, first_seed=500, store="mongomock", stop_at_first=True))
    assert not [v for v in rep.violations if any(f"[{k}]" in v for k in KINDS)], rep.violations[:5]
    for what in ("launches followed to their mark", "effects followed to their mark",
                 "fenced writes checked", "handed leases watched",
                 "replicas stalled past their leases"):
        assert rep.covered[what] > 0, what
    assert rep.faults["bulk marks timed out"] > 0


def test_harness_catches_an_unshielded_closing_flush(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch's closing flush not shielded: a hard stop cancels it, and the marks of the
    effects that ran are never written (they run again after their lease)."""

    @asynccontextmanager
    async def unshielded(self: Completer) -> AsyncIterator[None]:
        if self._staged is not None:
            yield
            return
        self._staged = []
        try:
            yield
        finally:
            await self.flush()  # cancelled with the batch
            self._staged = None

    monkeypatch.setattr(Completer, "batching", unshielded)
    rep = run_many(12)
    _caught(rep.violations, "effect-unmarked")


def test_harness_catches_an_insert_that_adopts_another_replicas_claim(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An insert that meets rows already claimed adopts them whatever claim holds them: two
    replicas draining one tenant, one runs and marks the other's rows under the other's
    claim."""
    upsert = MemoryEffectOutbox.upsert_rows

    async def adopting(self: MemoryEffectOutbox, rows: Sequence[EffectRow], *,
                       claim: ClaimTerms | None = None) -> UpsertResult:
        if claim is not None:
            every = tuple({str(d["claim_id"]) for d in self._docs.values()
                           if isinstance(d.get("claim_id"), str)})
            claim = ClaimTerms(claim_id=claim.claim_id, lease_until=claim.lease_until,
                               adopt=every)
        return await upsert(self, rows, claim=claim)

    monkeypatch.setattr(MemoryEffectOutbox, "upsert_rows", adopting)
    rep = run_many(3)
    _caught(rep.violations, "stale-claim")


def test_harness_catches_a_hand_off_that_leaves_its_waiting_rows_unbeaten(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The hand-off's beats leave the rows that wait out: a row that waits past its lease
    lapses, for any replica to reclaim and run."""
    monkeypatch.setattr(HandoffQueue, "due", lambda self, now: [])
    rep = run_many(10)
    _caught(rep.violations, "handoff-lapsed")


def test_harness_catches_riders_renewed_on_a_lost_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    """A beat runs what rides on each lease, the ones it found lost included: a launch whose
    row another replica reclaimed keeps its in-flight slots."""

    async def every_rider(self: Leases, leases: Any) -> None:
        await self._extend(leases)
        for lease in leases:
            for ride in list(lease.riders):
                await ride()

    monkeypatch.setattr(Leases, "extend_many", every_rider)
    rep = run_many(6)
    _caught(rep.violations, "slot-after-lost-lease")
