"""The effect's mark and the leases behind it, in the simulation, watched from outside.

``sim.py`` hooks this in where it already sees every store call of every replica (the turns),
every beat of the simulated heartbeat (``pass_time``) and the limit store's renewals
(``limits.LimitsWatch.on_renew``). Four invariants, each reported as ``[kind] ...``:

- ``effect-unmarked``: every effect that ran (a launch that returned, a row whose done mark
  its completer staged) ends with its done mark written under its claim, unless its replica
  was killed before the mark (a crash: the second residual window)
  or the lease it ran under ran out first (a store outage past the lease, as the heartbeat
  extended it: the flush gives up within one backoff step of its end). Seen live, when the
  worker lets go of the row's lease with the mark unwritten (it no longer holds it in flight),
  and when a replica's service ends -- a hard stop is not a kill: the closing flush is shielded.
- ``stale-claim``: no mark lands under a stale claim: every fenced write that lands (any
  transition, one row or many, and the heartbeat's beats) finds its row claimed under the
  writer's claim, and the claim is one the writing replica was given (by its own claim or
  reclaim, or minted for its own inserts) -- never another replica's.
- ``handoff-lapsed``: a handed row's lease never lapses while it waits in the hand-off, unless
  every beat that could have extended it (one within two beats of its end) failed.
- ``slot-after-lost-lease``: no in-flight slot is renewed by a beat of a lease that is lost (or
  at its cap): what rides on a lease stops with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from board_outbox.engine.work.done_marks import MARK_DONE_BACKOFF

# a flush that gives up does so within one pause of its lease's end
GIVE_UP_SLACK = max(MARK_DONE_BACKOFF)


@dataclass
class _Effect:
    rid: int
    service: Any
    row_key: str
    ref: Any
    claim_id: str
    lease: Any  # the worker's ``Lease`` of the row while it ran


@dataclass
class _Claimed:
    """The lease of a row the worker does not hold in flight, as its claim gave it."""

    until: float
    stopped: str = ""


@dataclass
class _Queued:
    until: float
    passed_over: bool = False  # a beat within two beats of its end left it out
    lapsed: bool = False


@dataclass
class MarksWatch:
    clock: Any
    beat_seconds: float  # the simulated heartbeat's period
    violations: list[str] = field(default_factory=list)
    residual: Counter[str] = field(default_factory=Counter)
    covered: Counter[str] = field(default_factory=Counter)
    effects: dict[tuple[int, Any, str], _Effect] = field(default_factory=dict)
    minted: dict[int, set[str]] = field(default_factory=dict)  # replica -> its claim ids
    queued: dict[int, _Queued] = field(default_factory=dict)  # id(lease) -> what was seen
    riding: Any = None  # the lease a beat of the simulated heartbeat is extending now

    # --- effect-unmarked ------------------------------------------------------------------

    def launched(self, rid: int, service: Any, row_key: str) -> None:
        """A launch returned on replica ``rid``: its effect happened."""
        lease = next((x for x in service.worker.inflight.values()
                      if x.claim.row is not None and x.claim.row.row_key == row_key), None)
        if lease is None:
            return
        c = lease.claim
        self.effects[(rid, c.ref, c.claim_id)] = _Effect(rid, service, row_key, c.ref,
                                                         c.claim_id, lease)
        self.covered["launches followed to their mark"] += 1

    def settled(self, rid: int, ref: Any, claim_id: str) -> None:
        """A mark of this row under this claim reached the store (landed or fenced out: a
        fenced-out mark means the lease was lost, the residual window the check counts)."""
        self.effects.pop((rid, ref, claim_id), None)

    def given_back(self, rid: int, ref: Any, claim_id: str) -> None:
        """Replica ``rid`` released this row (pending again, for anyone): if its effect ran
        under this claim, it runs again, though no lease was lost."""
        e = self.effects.pop((rid, ref, claim_id), None)
        if e is not None:
            self.violations.append(
                f"[effect-unmarked] row {e.row_key} ran on replica {rid} under claim "
                f"{claim_id[:8]}, then was given back pending with its done mark unwritten: it "
                f"runs again")

    def at_turn(self, rid: int, service: Any) -> None:
        """Replica ``rid`` makes a store call (or idles): the effects whose marks its completer
        has staged since (a projection unit's rows, launches) are followed too; has its worker
        let go of a row whose effect ran and whose mark is not written?"""
        if service is None:
            return
        worker = service.worker
        for x in worker.completer._staged or ():
            c = x.claim
            key = (rid, c.ref, c.claim_id)
            if key not in self.effects:
                # the lease as the worker holds it (one it no longer holds: as it was claimed)
                lease = worker.inflight.get(c.ref) or _Claimed(c.lease_until)
                self.effects[key] = _Effect(rid, service, x.row.row_key, c.ref, c.claim_id,
                                            lease)
                self.covered["effects followed to their mark"] += 1
        for key, e in list(self.effects.items()):
            if e.rid == rid and e.service is service and e.ref not in service.worker.inflight:
                del self.effects[key]
                self._judge(e, "its worker let go of the lease")

    def service_ended(self, rid: int, service: Any, killed: bool) -> None:
        """Replica ``rid``'s service is gone (crashed, hard-stopped after its shielded
        clean-up, or stopped): what it launched and never marked."""
        for key, e in list(self.effects.items()):
            if e.rid == rid and e.service is service:
                del self.effects[key]
                self.covered["launches unmarked when their replica's service ended"] += 1
                if killed:
                    self.residual["effect unmarked: its replica was killed before the mark"] += 1
                else:
                    self._judge(e, "its replica stopped")

    def finish(self, docs: Iterable[Mapping[str, Any]]) -> None:
        """The end of the schedule: an effect still open is unmarked unless its row is done
        under its claim (the mark landed as the schedule ended)."""
        done = {(d.get("row_key"), d.get("claim_id")) for d in docs if d.get("state") == "done"}
        for e in self.effects.values():
            if (e.row_key, e.claim_id) not in done:
                self._judge(e, "the schedule ended")
        self.effects.clear()

    def _judge(self, e: _Effect, why: str) -> None:
        now = self.clock.now()
        lease = e.lease
        if lease.stopped or lease.until - now <= GIVE_UP_SLACK:
            self.residual["effect unmarked: its lease ran out during a store outage"] += 1
            return
        self.violations.append(
            f"[effect-unmarked] row {e.row_key} ran on replica {e.rid} under claim "
            f"{e.claim_id[:8]}; {why} at {now:.1f} with its done mark unwritten, though its "
            f"lease held until {lease.until:.1f}")

    # --- stale-claim -----------------------------------------------------------------------

    def new_service(self, rid: int) -> None:
        """A replica (re)started: a new process, holding no claim."""
        self.minted[rid] = set()

    def given(self, rid: int, claim_ids: Iterable[str]) -> None:
        """Claims minted for replica ``rid`` (its claim, its reclaim, its inserts' terms)."""
        self.minted.setdefault(rid, set()).update(claim_ids)

    def landed(self, rid: int, what: str, ref: Any, claim_id: str,
               before: Mapping[str, Any] | None, *, fence_checked: bool) -> None:
        """A fenced write by replica ``rid`` under ``claim_id`` changed row ``ref``, which was
        ``before`` (``fence_checked``: the row's fence is the ``[unfenced]`` check's already)."""
        if before is None:
            return
        key = before.get("row_key")
        held = before.get("state") == "claimed" and before.get("claim_id") == claim_id
        if not held and not fence_checked:
            self.violations.append(
                f"[stale-claim] {what} by replica {rid} under claim {claim_id[:8]} landed on row "
                f"{key}, which was {before.get('state')} under claim "
                f"{str(before.get('claim_id'))[:8]}")
        elif claim_id not in self.minted.get(rid, set()):
            self.violations.append(
                f"[stale-claim] {what} by replica {rid} landed on row {key} under claim "
                f"{claim_id[:8]}, which no claim, reclaim or insert of that replica minted")
        self.covered["fenced writes checked"] += 1

    # --- handoff-lapsed --------------------------------------------------------------------

    def before_beat(self, rid: int, queued: Iterable[Any]) -> None:
        """The clock moved: a handed row's lease that ended since the last beat lapsed while it
        waited."""
        now = self.clock.now()
        for lease in queued:
            st = self.queued.get(id(lease))
            if st is None or st.until != lease.until:  # new, or extended by a tick's own beat
                if lease.until <= now:
                    continue  # it came in lapsed (an insert slower than its lease)
                st = self.queued[id(lease)] = _Queued(lease.until)
            if st.lapsed or lease.stopped:
                continue
            if lease.until <= now:
                st.lapsed = True
                if st.passed_over:
                    self.violations.append(
                        f"[handoff-lapsed] replica {rid}'s handed row "
                        f"{lease.claim.row.row_key if lease.claim.row else lease.claim.ref} "
                        f"lapsed at {now:.1f} (lease until {lease.until:.1f}) while it waited; "
                        f"a beat within two beats of its end had left it out")
                else:
                    self.residual["handed row's lease lapsed: every beat that could extend it "
                                  "failed"] += 1

    def after_beat(self, queued: Iterable[Any], beaten: set[int]) -> None:
        """This beat extended (or tried to) the leases in ``beaten`` (ids): a waiting lease left
        out of it though it ends within two beats is passed over."""
        now = self.clock.now()
        horizon = 2 * self.beat_seconds
        seen: set[int] = set()
        for lease in queued:
            seen.add(id(lease))
            st = self.queued.get(id(lease))
            if st is None or st.until != lease.until:
                if lease.until <= now:  # it came in lapsed (an insert slower than its lease)
                    continue
                st = self.queued[id(lease)] = _Queued(lease.until)
                self.covered["handed leases watched"] += 1
            if id(lease) not in beaten and lease.until - now < horizon:
                st.passed_over = True
        for gone in set(self.queued) - seen:
            del self.queued[gone]

    # --- slot-after-lost-lease -------------------------------------------------------------

    def renewed(self, key: str, holder: str) -> None:
        """The limit store renewed ``holder``'s slot of ``key``."""
        lease = self.riding
        if lease is not None and lease.stopped:
            self.violations.append(
                f"[slot-after-lost-lease] a beat renewed {holder}'s slot of {key} though the "
                f"lease it rides on is {lease.stopped} (until {lease.until:.1f})")
