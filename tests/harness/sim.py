"""Deterministic fault-injection simulation of N board-outbox replicas (SPEC B2).

Every replica runs its own Tail and EffectWorker (fresh in-memory state after each crash) over
one shared store. Each store call of each replica first parks at a *turn*; a driver resumes one
parked replica at a time, chosen by a ``Decider`` (a seeded RNG, or a list of choices drawn by
Hypothesis so that failing schedules shrink). Between turns the driver acts on the world: emits
events (some with a slow insert), edits or deletes subscriptions, deletes cards, plants poison
events, jumps the clock. At turns it injects faults: a transient StoreUnavailable, a crash
before the call, or a crash after it.

After the fault phase, faults stop, the world stops changing, and the replicas run until
everything settles; then ``check`` evaluates the invariants of ADR-094's delivery semantics.
"""

from __future__ import annotations

import contextlib
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import msgspec

from board_outbox.adapters.memory import MemoryBackend, MemoryLauncher, MemoryMembershipStore
from board_outbox.adapters.memory.tokens import MemoryResumeTokenStore
from board_outbox.engine.flow.leases import Leases
from board_outbox.engine.flow.membership import owner
from board_outbox.engine.handlers.registry import ExecutionContext
from board_outbox.engine.tail.tail import Tail
from board_outbox.model.board import Card, EventSnapshot
from board_outbox.model.clock import ManualClock
from board_outbox.model.epoch import EPOCH_KEY
from board_outbox.model.errors import StoreUnavailable
from board_outbox.model.records import Change
from board_outbox.model.row_keys import launch_row_key, projection_row_key
from board_outbox.model.rows import EffectRow, new_launch_row
from board_outbox.model.subscriptions import MatchRule, Subscription, matches
from board_outbox.ports import Stores
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from tests.harness import limits as F2
from tests.harness.marks import MarksWatch
from tests.support.faults import Crash, point_of

LEASE = 10.0
HEARTBEAT_FRACTION = 0.34
HEARTBEAT = True  # tests of the lease-steal paths turn the simulated heartbeat off
MAX_EXECUTION = 120.0
YOUNG_GAP = 30.0
POISON_TICKS = 3
# S1: another owner's row is taken only this long after it was materialized; the expired-lease
# sweep runs more often than that (so that a cut-off computed from the wrong setting steals early)
STEAL_AFTER = 4.0
RECLAIM_EVERY = 1.0
TOKEN_EVERY = 5.0  # S4: at most one resume-token save per replica per this long (sim clock)
FRAGILE = "fragile"  # a projection that raises on some events (every event of card number % 5 == 0)
SEED_MODES = ("earliest", "latest")
# the fenced single-row marks (fault points name the transition: tests/support/faults.point_of)
CONSUMED_MARK = "outbox.apply_claimed[consumed]"
DONE_MARK = "outbox.apply_claimed[done]"
# the completer's flush: the staged done marks of a batch in one write (issue 29)
BULK_DONE = "outbox.apply_marks[done]"
DEFER = "outbox.apply_claimed[defer]"  # a row over a limit waits (F2)
MARKS = (CONSUMED_MARK, DONE_MARK, "outbox.apply_claimed[retry]", "outbox.apply_claimed[park]",
         "outbox.apply_claimed[release]")
# where a replica waits holding a launch's in-flight slots (F2)
MID_LAUNCH = ("launcher.launch", "labels.consume", CONSUMED_MARK, "limits.take", "limits.release")
FAULT_KINDS = ("none", "transient", "crash_before", "crash_after")
ENV_ACTIONS = ("emit", "emit_slow", "finish_slow", "tick", "jump", "edit_sub", "delete_sub",
               "delete_card", "poison", "outage", "cross_tenant", "stop", "stall", "slow_marks")
# how many steps a stalled replica stays frozen (``stall``: a process paused past its leases --
# a long GC, a frozen VM): it neither moves nor beats while the clock moves past its leases and
# the others reclaim what it held; then it thaws, its heartbeat first
STALL_STEPS = 30
# ``slow_marks``: the next replica that writes a batch's done marks meets a store that takes
# each bulk write to its op timeout and then fails, this many times in a row -- an outage longer
# than the rows' original lease, while the heartbeat's small writes still land
SLOW_MARK_TRIES = 4
OP_TIMEOUT = 4.0
# The real time one schedule may take (its time is simulated: a schedule takes well under a
# second on the memory twins, a few over mongomock, tens on the wire). Past it the schedule is
# stuck -- a replica waiting on what no turn brings, the driver waiting on a replica that never
# parks -- and is reported ``[hung]``, so a broken build fails fast instead of holding the run
# until the test's timeout.
SCHEDULE_SECONDS = {"memory": 30.0, "mongomock": 60.0, "wire": 300.0}
# Each invariant violation is reported as "[kind] detail"; the self-tests assert on the kind.
VIOLATION_KINDS = (
    "duplicate-row", "not-settled", "lost-event", "young-gap-stepped", "poison-row",
    "poison-early", "seed", "missing-row", "double-launch", "phantom-launch", "no-launch",
    "one-shot-lost", "one-shot-count", "labels-consumed-twice", "consume-again", "cross-tenant",
    "stale-rule", "budget", "parked-early", "reclaim-uncounted", "outage-not-parked", "unfenced",
    "early-steal", "token-not-saved", "token-throttle", "projection-failure",
    # F2, the launch gate's limits (tests/harness/limits.py)
    "over-limit", "deferral-attempt", "slot-leaked", "needless-deferral", "over-rate",
    "slot-lifetime", "slot-fence",
    # the effect's mark and the leases behind it (tests/harness/marks.py)
    "effect-unmarked", "stale-claim", "handoff-lapsed", "slot-after-lost-lease",
    # the schedule did not finish within SCHEDULE_SECONDS of real time
    "hung",
)


def violation_kinds(violations: Sequence[str]) -> Counter[str]:
    """How many violations of each kind (``[kind]`` in each message)."""
    out: Counter[str] = Counter()
    for v in violations:
        m = re.search(r"\[([a-z-]+)\]", v)
        out[m.group(1) if m else "?"] += 1
    return out
# S1 (``membership=True``): replicas drain only the tenants they own by rendezvous hashing over
# their membership view. A replica's restart is a join; these change the views under them.
MEMBER_ACTIONS = ("member_leave", "member_expire", "split_view")


# --- decisions ----------------------------------------------------------------------------


class Decider:
    """Where every choice comes from. ``choose(n)`` returns 0..n-1."""

    def choose(self, n: int) -> int:
        raise NotImplementedError

    @property
    def exhausted(self) -> bool:
        return False


class RandomDecider(Decider):
    def __init__(self, seed: int, steps: int) -> None:
        self.rng = random.Random(seed)
        self.left = steps

    def choose(self, n: int) -> int:
        self.left -= 1
        return self.rng.randrange(n)

    @property
    def exhausted(self) -> bool:
        return self.left <= 0


class RecordingDecider(RandomDecider):
    """A RandomDecider that keeps its choices, so a failing schedule can be replayed and shrunk."""

    def __init__(self, seed: int, steps: int) -> None:
        super().__init__(seed, steps)
        self.record: list[int] = []

    def choose(self, n: int) -> int:
        c = super().choose(n)
        self.record.append(c)
        return c


class ListDecider(Decider):
    """Replays a list of choices (Hypothesis draws and shrinks it); 0 once it runs out."""

    def __init__(self, choices: Sequence[int]) -> None:
        self.choices = list(choices)
        self.i = 0

    def choose(self, n: int) -> int:
        if self.i >= len(self.choices):
            self.i += 1
            return 0
        c = self.choices[self.i] % n
        self.i += 1
        return c

    @property
    def exhausted(self) -> bool:
        return self.i >= len(self.choices)


# --- the world ------------------------------------------------------------------------------


@dataclass
class Report:
    schedules: int = 0
    steps: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    env: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    residual: Counter[str] = field(default_factory=Counter)
    covered: Counter[str] = field(default_factory=Counter)  # production paths the run drove
    dead_letters: int = 0
    launches: int = 0
    rows: int = 0
    trace: list[str] = field(default_factory=list)

    def add(self, other: Report) -> None:
        self.schedules += other.schedules
        self.steps += other.steps
        self.faults.update(other.faults)
        self.env.update(other.env)
        self.violations += other.violations
        self.residual.update(other.residual)
        self.covered.update(other.covered)
        self.dead_letters += other.dead_letters
        self.launches += other.launches
        self.rows += other.rows


IDLE = "replica.idle"  # the turn a replica's loop takes after each tick


class TurnMisuse(BaseException):
    """The simulation's own bug (two store calls of one replica at once): it ends the run."""


class Turns:
    """The turn scheduler: replicas park before each store call; the driver resumes one."""

    def __init__(self) -> None:
        self.parked: dict[int, tuple[anyio.Event, str]] = {}
        self.running = 0
        self.all_parked = anyio.Event()
        self.decisions: dict[int, str] = {}
        self.closed = False

    def close(self) -> None:
        """End of schedule: wake every parked replica and stop parking, so that replicas being
        cancelled can finish their shielded clean-up instead of waiting for a turn forever."""
        self.closed = True
        for ev, _point in self.parked.values():
            ev.set()
        self.parked.clear()

    async def turn(self, rid: int, point: str) -> str:
        if self.closed:  # the schedule is over: let shielded clean-up (claim release) through
            return "none"
        if rid in self.parked:  # a turn is one store call per replica: a second one at once
            # (a real-time timer's, a second lane's) would corrupt the count and hang the
            # schedule; say so, past the worker's ``except Exception`` (which took an
            # AssertionError here for an effect's failure, and retried)
            raise TurnMisuse(f"replica {rid} calls {point} while parked at "
                             f"{self.parked[rid][1]}")
        ev = anyio.Event()
        self.parked[rid] = (ev, point)
        self.running -= 1
        if self.running == 0:
            self.all_parked.set()
        try:
            await ev.wait()
        except anyio.get_cancelled_exc_class():
            # cancelled while parked (a launch cut at its in-flight slot's end, F2): the call
            # is not made, and the replica runs on from here, not parked
            if self.parked.get(rid, (None, ""))[0] is ev:
                del self.parked[rid]
                self.running += 1
            self.decisions.pop(rid, None)
            raise
        return self.decisions.pop(rid, "none")

    def start(self) -> None:
        self.running += 1

    async def wait_all_parked(self) -> None:
        while self.running > 0:
            self.all_parked = anyio.Event()
            await self.all_parked.wait()

    def resume(self, rid: int, fault: str) -> str:
        ev, point = self.parked.pop(rid)
        self.decisions[rid] = fault
        self.running += 1
        ev.set()
        return point


class SimPort:
    """A replica's view of a shared port: every call waits for its turn and may be faulted."""

    def __init__(self, target: Any, prefix: str, rid: int, sim: Simulation) -> None:
        self._target, self._prefix, self._rid, self._sim = target, prefix, rid, sim

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr) or name.startswith("_"):
            return attr
        prefix, sim, rid = self._prefix, self._sim, self._rid

        async def call(*args: Any, **kwargs: Any) -> Any:
            point = point_of(prefix, name, args)
            if point != "launcher.launch":
                return await faulted(point, *args, **kwargs)
            # F2: a launch is in flight from the runner's side from its turn to its end
            launch = sim.limits.launch_begins(rid, args[0])
            try:
                return await faulted(point, *args, **kwargs)
            finally:
                sim.limits.launch_ends(launch)

        async def faulted(point: str, *args: Any, **kwargs: Any) -> Any:
            sim.called_at[rid] = sim.clock.now()  # when the caller decided (before its turn)
            sim.marks.at_turn(rid, sim.services.get(rid))
            fault = await sim.turns.turn(rid, point)
            if fault != "none" and prefix == "limits":
                sim.limits.faulted(name, args, fault)
            if fault == "transient":
                sim.note_transient(rid, point)
                raise StoreUnavailable(f"injected at {point}")
            if fault == "crash_before":
                sim.note_crash(rid, point, "before")
                raise Crash(point)
            before = sim.store.row_by_ref(args[0]) if point in (*MARKS, DEFER) else None
            befores = [sim.store.row_by_ref(m.ref) for m in args[0]] if point == BULK_DONE else []
            fenced = sim.fenced_before(prefix, name, args, kwargs)
            result = await attr(*args, **kwargs)
            if fenced:
                sim.fenced_after(rid, point, fenced, result)
            if point in MARKS:
                sim.check_fenced(point, args, result, before)
            if point == BULK_DONE:
                for m, was in zip(args[0], befores, strict=True):
                    if was is not None and was.get("state") == "done" and \
                            was.get("claim_id") == m.claim_id:
                        continue  # a retry finding its own landed mark: moved, by us
                    sim.check_fenced(point, (m.ref, m.claim_id), m.ref in result, was)
            if point == DEFER:
                sim.limits.deferred(before, sim.store.row_by_ref(args[0]), bool(result))
            sim.observe(rid, point, args, kwargs, result)
            if fault == "crash_after":
                sim.note_crash(rid, point, "after")
                raise Crash(point + ".after")
            return result

        return call


class SimStore:
    """The shared store under the simulation, with the raw (synchronous, turn-free) access the
    driver needs to act on the world and to audit it."""

    def __init__(self, stores: Stores) -> None:
        self.stores = stores

    def allocate(self, tenant: str) -> int:
        raise NotImplementedError

    def insert(self, doc: dict[str, Any]) -> None:
        raise NotImplementedError

    def cursors(self) -> dict[str, int]:
        raise NotImplementedError

    def row_docs(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def row_by_ref(self, ref: Any) -> dict[str, Any] | None:
        """The stored row a mark's ``ref`` names, as it is now (a copy)."""
        raise NotImplementedError


class MemorySimStore(SimStore):
    def __init__(self) -> None:
        self.b = MemoryBackend()
        super().__init__(self.b.stores())

    def allocate(self, tenant: str) -> int:
        seq = self.b.events._counters.get(tenant, 0) + 1
        self.b.events._counters[tenant] = seq
        return seq

    def insert(self, doc: dict[str, Any]) -> None:
        self.b.events.insert_now(doc)

    def cursors(self) -> dict[str, int]:
        return dict(self.b.cursors._cursors)

    def row_docs(self) -> list[dict[str, Any]]:
        return self.b.outbox.all_docs()

    def row_by_ref(self, ref: Any) -> dict[str, Any] | None:
        doc = self.b.outbox._docs.get(ref)
        return None if doc is None else dict(doc)


class MongomockSimStore(SimStore):
    """The Mongo adapters (pymongo-API code paths) over mongomock."""

    def __init__(self) -> None:
        from board_outbox.adapters.mongo import mongo_stores
        from tests.support.mongomock_async import mock_database

        self.db = mock_database()
        self.raw = self.db._db
        super().__init__(mongo_stores(self.db, MemoryLauncher(), change_feed=False))

    async def prepare(self) -> None:
        from board_outbox.adapters.mongo import ensure_schema

        await ensure_schema(self.db)

    def allocate(self, tenant: str) -> int:
        from pymongo import ReturnDocument

        doc = self.raw["board_event_counters"].find_one_and_update(
            {"_id": tenant}, {"$inc": {"seq": 1}}, upsert=True, return_document=ReturnDocument.AFTER)
        return int(doc["seq"])

    def insert(self, doc: dict[str, Any]) -> None:
        self.raw["board_events"].insert_one(dict(doc))

    def cursors(self) -> dict[str, int]:
        return {d["_id"]: d["seq"] for d in self.raw["trigger_cursors"].find({})
                if d["_id"] != EPOCH_KEY}  # the store's epoch is no tenant's cursor

    def row_docs(self) -> list[dict[str, Any]]:
        return list(self.raw["trigger_effects"].find({}))

    def row_by_ref(self, ref: Any) -> dict[str, Any] | None:
        doc = self.raw["trigger_effects"].find_one({"_id": ref})
        return None if doc is None else dict(doc)


def _wire_store() -> SimStore:
    from tests.harness.wire import WireSimStore

    return WireSimStore()  # type: ignore[return-value]


STORES: dict[str, Callable[[], SimStore]] = {"memory": MemorySimStore, "mongomock": MongomockSimStore,
                                             "wire": _wire_store}


@dataclass
class EventInfo:
    tenant: str
    seq: int
    card: str
    kind: str  # normal | poison
    inserted_step: int | None = None
    allocated_at: float = 0.0
    inserted_at: float | None = None


class Simulation:
    def __init__(self, decider: Decider, *, replicas: int = 3, tenants: int = 2,
                 fault_percent: int = 8, max_attempts: int = 6, trace: bool = False,
                 tail_cls: type[Tail] = Tail, store: str = "memory",
                 seed_mode: str | None = None, membership: bool = True) -> None:
        self.tail_cls = tail_cls
        self.seed_mode = seed_mode  # None: drawn by the decider (both modes get drawn)
        self.membership = membership
        self.env_actions = ENV_ACTIONS + (MEMBER_ACTIONS if membership else ())
        self.members = MemoryMembershipStore()
        self.silent: dict[int, int] = {}  # rid -> step until which it does not heartbeat
        self.frozen: set[int] = set()  # split view: these replicas keep the view they were given
        self.store = STORES[store]()
        self.wall_seconds = SCHEDULE_SECONDS[store]
        self.hung = False
        self.d = decider
        self.n_replicas = replicas
        self.tenants = [f"t{i}" for i in range(tenants)]
        self.fault_percent = fault_percent
        self.max_attempts = max_attempts
        # a fixed instant after today: deterministic, and a TTL index (Mongo) expires nothing
        self.clock = ManualClock(1_900_000_000.0)
        self.launcher = MemoryLauncher()
        self.turns = Turns()
        self.report = Report(schedules=1)
        self.tracing = trace
        self.step = 0
        self.faults_on = True
        self.events: dict[tuple[str, int], EventInfo] = {}
        self.slow: list[tuple[str, int, str]] = []
        self.subs: dict[str, Subscription] = {}
        self.edited_subs: set[str] = set()
        self.deleted_subs: set[str] = set()
        self.deleted_cards: set[tuple[str, str]] = set()
        self.consumed: Counter[tuple[str, str]] = Counter()
        self.window1: set[str] = set()  # crash between label consume and consume_marked
        self.window1_lease: set[str] = set()  # lease lost there (the launch then goes ahead)
        self.window2: set[str] = set()  # crash (or store outage) between launch and mark_done
        self.window2_lease: set[str] = set()  # lease lost (a stall past it) between the two
        self.current_row: dict[int, str] = {}
        self.done_blips: Counter[str] = Counter()
        self.cursor_passed: dict[tuple[str, int], int] = {}
        self.cross_tenant: list[str] = []
        self.n_cards = 0
        self.cursor_passed_at: dict[tuple[str, int], float] = {}
        self.seeded: dict[str, int] = {}  # tenant -> the cursor's seed
        self.head_reads: Counter[tuple[int, str, int]] = Counter()  # (replica, tenant, seq)
        self.claim_attempts: dict[str, int] = {}  # row_key -> attempts at its last claim
        self.claimed: dict[int, dict[str, EffectRow]] = {}  # replica -> rows as it last claimed them
        self.sub_read: dict[int, Subscription] = {}  # replica -> the subscription it last read
        self.planted: set[str] = set()  # cross-tenant rows planted by the driver
        self.planted_subs: set[str] = set()  # the subscriptions they name
        self.moved_subs: set[str] = set()  # subscriptions moved to another tenant
        self.outage_left = 0
        self.launcher.fail = self._refuse
        self.live_violations: list[str] = []  # found while the schedule runs
        self.services: dict[int, Service] = {}  # each replica's current service
        self.tokens = MemoryResumeTokenStore()  # the resume token every replica saves (S4)
        self.n_tokens = 0  # the stream's position: one token per insert
        self.changes: dict[int, list[Change]] = {}  # what each replica's stream has to deliver
        self.delivered: dict[int, Any] = {}  # the last token each replica's stream delivered
        self.token_writes: dict[int, Any] = {}  # the last token each replica saved
        self.token_saved_at: dict[int, float] = {}
        self.save_faulted: set[int] = set()  # its last token save was refused (a fault)
        # replica -> the rows it launched whose done marks are not written yet (staged for the
        # completer's flush: a crash then doubles each of them, ADR-094's second window)
        self.launch_open: dict[int, set[str]] = {}
        self.split: dict[int, list[str]] = {}  # replica -> the split view it adopts next
        self.called_at: dict[int, float] = {}  # clock time of each replica's current store call
        # F2: every limit store call accounted (tests/harness/limits.py), and what the limits
        # collection holds at the start
        slot_docs, self.put_limit_doc = F2.raw_access(self.store)
        self.limits = F2.LimitsWatch(self.clock, lambda sid: sid.partition(".")[2], slot_docs)
        self.limits.covered = self.report.covered
        base = self.store.stores.limits
        self.limit_store = None if base is None else self.limits.store(base)
        self.stops: dict[int, anyio.CancelScope] = {}  # each replica's, for a hard stop
        # the effect's mark and the leases behind it (tests/harness/marks.py)
        self.marks = MarksWatch(self.clock, LEASE * HEARTBEAT_FRACTION)
        self.marks.covered = self.report.covered
        self.limits.on_renew = self.marks.renewed
        self.stalled: dict[int, int] = {}  # rid -> the step it thaws at (``stall``)
        self.stalled_rows: set[str] = set()  # rows a replica held when it stalled
        self.stop_armed = False  # a hard stop waits for a replica resumed mid-launch
        self.stop_staged = False  # ... or for one resumed with done marks staged
        self.stall_armed = False  # a stall waits for a replica resumed mid-launch or flush
        self.slow_marks_armed = False  # slow bulk marks wait for a replica resumed to flush
        self.slow_marks: dict[int, int] = {}  # rid -> its bulk marks still to time out

    # --- observation hooks (called by SimPort) ----------------------------------------------

    def log(self, msg: str) -> None:
        if self.tracing:
            self.report.trace.append(f"{self.step:4d} {msg}")

    def note_crash(self, rid: int, point: str, when: str) -> None:
        row = self.current_row.get(rid)
        self.report.faults[f"crash {when} {point}"] += 1
        if row is None:
            return
        if (point, when) in (("labels.consume", "after"), (CONSUMED_MARK, "before")):
            self.window1.add(row)
        # (a grouped done mark, apply_claimed_many, carries projection rows only: no launch window)
        if (point, when) in (("launcher.launch", "after"), (DONE_MARK, "before")):
            self.window2.add(row)
        # launched, not marked: any crash between is the window, for every row staged then
        self.window2 |= self.launch_open.get(rid, set())

    def note_transient(self, rid: int, point: str) -> None:
        if point == "tokens.save":
            self.save_faulted.add(rid)
        if point == BULK_DONE:
            # the flush rides the outage out while the first lease lasts: a clock jump past it
            # leaves the marks unrecorded (the worker says so) and the rows run again
            self.window2_lease |= self.launch_open.get(rid, set())
        row = self.current_row.get(rid)
        if row is not None and point == DONE_MARK:
            self.done_blips[row] += 1
            if self.done_blips[row] >= 3:  # every retry of the done mark failed
                self.window2.add(row)
            elif self.membership:
                # the retries ride out the outage only while the lease lasts: a clock jump past
                # it between two attempts leaves the mark unrecorded (the worker says so) and
                # the row runs again -- the same residual window
                self.window2_lease.add(row)

    def fenced_before(self, prefix: str, name: str, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> list[tuple[Any, str, str, Any]]:
        """The rows a fenced write names: (ref, claim_id, transition, the row as it is now)."""
        if prefix != "outbox":
            return []
        if name == "apply_claimed":
            named = [(args[0], args[1], args[2].name)]
        elif name == "apply_claimed_many":
            named = [(ref, args[1], args[2].name) for ref in args[0]]
        elif name == "apply_marks":
            named = [(m.ref, m.claim_id, m.t.name) for m in args[0]]
        elif name == "park_broken" and kwargs.get("claim_id") is not None:
            named = [(args[0], kwargs["claim_id"], "park_broken")]
        else:
            return []
        return [(ref, cid, t, self.store.row_by_ref(ref)) for ref, cid, t in named]

    def fenced_after(self, rid: int, point: str, named: list[tuple[Any, str, str, Any]],
                     result: Any) -> None:
        """What a fenced write did: each row it moved is checked (``[stale-claim]``), and a
        mark that ends the claim settles the effect the row's launch had (landed or fenced
        out: the store has answered it)."""
        moved = set(result) if isinstance(result, list) else (
            {ref for ref, _c, _t, _b in named} if result else set())
        for ref, cid, t, before in named:
            if ref in moved:
                self.marks.landed(rid, point, ref, cid, before,
                                  fence_checked=point in MARKS or point == BULK_DONE)
            if t == "release" and ref in moved:
                self.marks.given_back(rid, ref, cid)
            elif t not in ("consumed", "extend_lease"):
                self.marks.settled(rid, ref, cid)

    def check_fenced(self, point: str, args: tuple[Any, ...], result: Any,
                     before: dict[str, Any] | None) -> None:
        """Every mark is fenced by claim_id: it writes only while the row is claimed under the
        caller's claim_id, and a refused mark writes nothing."""
        ref, claim_id = args[0], args[1]
        after = self.store.row_by_ref(ref)
        key = (before or after or {}).get("row_key")
        held = before is not None and before.get("state") == "claimed" and \
            before.get("claim_id") == claim_id
        if result and not held:
            b = before or {}
            self.live_violations.append(
                f"[unfenced] {point} by claim {claim_id} wrote row {key}, which was "
                f"{b.get('state')} under claim {b.get('claim_id')}")
        elif not result and before is not None and after is not None:
            fields = ("state", "outcome", "attempts", "consume_marked", "claim_id", "not_before")
            if any(before.get(f) != after.get(f) for f in fields):
                self.live_violations.append(
                    f"[unfenced] {point} by claim {claim_id} was refused but changed row {key}")

    def observe(self, rid: int, point: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                result: Any) -> None:
        if point == "tokens.save":
            self._observe_token_save(rid, args[0])
        if point == "outbox.claim_any":
            self._observe_steals(rid, result)
        if point == "cursor.seed":
            self._observe_seed(args[0], args[1], result)
        if point == "events.read_after" and result:
            head = result[0].seq
            info = self.events.get((args[0], head))
            if head > args[1] and info is not None and info.kind == "poison":
                self.head_reads[(rid, args[0], head)] += 1  # a head-of-line tick of a poison
        if point == "outbox.upsert_rows" and result.claims:
            self.report.covered["rows claimed by the hand-off"] += len(result.claims)
        if point in ("outbox.claim_any", "outbox.reclaim_expired", "outbox.upsert_rows"):
            # a tick's claims: the expired leases it reclaimed, then the due rows it claimed;
            # and the rows its tail inserted born claimed for it
            mine = self.claimed.setdefault(rid, {})
            for claim in (result.claims if point == "outbox.upsert_rows" else result):
                if claim.row is None:
                    continue
                key = claim.row.row_key
                prev = self.claim_attempts.get(key)
                if claim.reclaimed and prev is not None and claim.row.attempts <= prev:
                    self.live_violations.append(
                        f"[reclaim-uncounted] row {key} reclaimed after its lease expired with "
                        f"attempts {claim.row.attempts}, as at its previous claim")
                self.claim_attempts[key] = claim.row.attempts
                mine[key] = claim.row
        if point in ("outbox.claim_any", "outbox.reclaim_expired"):
            self.marks.given(rid, (c.claim_id for c in result))
        if point == "outbox.upsert_rows" and kwargs.get("claim") is not None:
            self.marks.given(rid, [kwargs["claim"].claim_id])
        if point == "subs.get":
            self.sub_read[rid] = result
        if point == "labels.consume":
            by = kwargs.get("by", args[3] if len(args) > 3 else "")
            row = self.claimed.get(rid, {}).get(by)
            if row is not None and row.consume_marked:
                self.live_violations.append(
                    f"[consume-again] row {by} already spent its one-shot (consume_marked) and "
                    f"consumed again on a retry ({result})")
        if point == "labels.consume" and result == "consumed":
            self.consumed[(args[0], args[1])] += 1
        if point == "launcher.launch":
            req = args[0]
            self.launch_open.setdefault(rid, set()).add(req.row_key)
            if rid in self.services:
                self.marks.launched(rid, self.services[rid], req.row_key)
            row_tenant = req.row_key.split("/", 1)[0]
            sub = self.sub_read.get(rid)
            if sub is None or sub.sub_id != req.sub_id:
                sub = self.subs.get(req.sub_id)
            if req.tenant_id != row_tenant or (sub is not None and sub.tenant_id != req.tenant_id):
                self.cross_tenant.append(req.row_key)
            row = self.claimed.get(rid, {}).get(req.row_key)
            # Execution decides by the subscription as read at execution time (a row that
            # already spent its one-shot launches whatever the rule says now).
            if (row is not None and sub is not None and row.event is not None
                    and not row.consume_marked and not matches(sub, row.event)):
                self.live_violations.append(
                    f"[stale-rule] row {req.row_key} launched though subscription {sub.sub_id} "
                    f"(enabled={sub.enabled}, rule={sub.rule}) no longer matches its event")
        if point == CONSUMED_MARK and result is False:
            row = self.current_row.get(rid)
            if row is not None:
                self.window1_lease.add(row)  # consumed, then the lease was gone before the mark
        if point in MARKS:
            row = self.current_row.get(rid)
            if row is not None:
                self.launch_open.get(rid, set()).discard(row)
        if point == BULK_DONE:
            for m in args[0]:
                doc = self.store.row_by_ref(m.ref)
                if doc is not None:
                    self.launch_open.get(rid, set()).discard(doc.get("row_key"))
                    if m.ref not in result and \
                            any(r.row_key == doc.get("row_key") for r in self.launcher.launches):
                        self.window2_lease.add(str(doc.get("row_key")))  # fenced out: lease lost
        if point == "outbox.apply_claimed[defer]" and result:
            self.report.covered["rows deferred by a limit"] += 1
        if point == DONE_MARK and result is False:
            row = self.current_row.get(rid)
            if row is not None and any(r.row_key == row for r in self.launcher.launches):
                self.window2_lease.add(row)  # lease lost after the launch: the mark was fenced out

    def _observe_token_save(self, rid: int, token: Any) -> None:
        """S4: a replica saves at most one token per TOKEN_EVERY, except on its way out (each
        save timed when the replica called it: the clock may move while it waits its turn)."""
        now = self.called_at.get(rid, self.clock.now())
        last = self.token_saved_at.get(rid)
        service = self.services.get(rid)
        forced = service is not None and service.stopping
        if last is not None and now - last < TOKEN_EVERY and not forced:
            self.live_violations.append(
                f"[token-throttle] replica {rid} saved token {token} {now - last:.1f}s after its "
                f"previous save (at most one per {TOKEN_EVERY:.0f}s)")
        self.token_saved_at[rid] = now
        self.report.covered["token saves"] += 1
        self.token_writes[rid] = token
        self.save_faulted.discard(rid)

    def _observe_steals(self, rid: int, claims: Any) -> None:
        """S1: a row of a tenant another live member owns (in the claimer's own view) is taken
        only once STEAL_AFTER has passed since it was materialized. Ownership is recomputed
        here from the view's members, not asked of the code under test."""
        service = self.services.get(rid)
        if service is None:
            return
        # the view the claim was decided with: it changes only at the replica's own passes
        view = service.ownership
        members = view.members
        if not self.membership or len(members) < 2:
            return
        at = self.called_at[rid]
        for claim in claims:
            row = claim.row
            if row is None or claim.reclaimed:
                continue
            holder = owner(members, row.tenant_id)
            if holder == view.member_id:
                continue
            self.report.covered["claims of another owner's row"] += 1
            if row.created_at > at - STEAL_AFTER:
                self.live_violations.append(
                    f"[early-steal] replica {rid} took row {row.row_key} of a tenant member "
                    f"{holder} owns {at - row.created_at:.1f}s after it was materialized (steal "
                    f"delay {STEAL_AFTER:.0f}s)")

    def _observe_seed(self, tenant: str, proposed: int, got: int) -> None:
        inserted = [seq for (t, seq), info in self.events.items()
                    if t == tenant and info.inserted_step is not None]
        top = max(inserted, default=0)
        mode = self.seed_mode
        if mode == "earliest" and proposed != 0:
            self.live_violations.append(f"[seed] earliest seed of {tenant} is {proposed}, not 0")
        if mode == "latest" and proposed > top:
            self.live_violations.append(
                f"[seed] latest seed of {tenant} is {proposed}, past the highest inserted seq "
                f"{top}: allocated events not yet inserted would be skipped")
        self.seeded.setdefault(tenant, got)

    def _refuse(self, req: Any) -> bool:
        """The launcher: bot ``broken`` is refused forever (a permanent outage); an ``outage``
        refuses the next few launches of any bot."""
        if req.bot == "broken":
            return True
        self.outage_left -= 1
        return self.outage_left >= 0

    # --- replicas ---------------------------------------------------------------------------

    def _stores(self, rid: int) -> Stores:
        b = self.store.stores

        def w(target: Any, prefix: str) -> Any:
            return SimPort(target, prefix, rid, self)

        return Stores(events=w(b.events, "events"), cursors=w(b.cursors, "cursor"),
                      outbox=w(b.outbox, "outbox"), subs=w(b.subs, "subs"), cards=w(b.cards, "cards"),
                      labels=w(b.labels, "labels"), launcher=w(self.launcher, "launcher"),
                      readmodels=w(b.readmodels, "readmodel"), tokens=w(self.tokens, "tokens"),
                      members=self.members,
                      rm_versions=None if b.rm_versions is None else w(b.rm_versions, "generations"),
                      limits=None if self.limit_store is None else w(self.limit_store, "limits"))

    def _service(self, rid: int) -> Service:
        """One replica: the service ``run`` builds (config, composition root, the loops' passes),
        on the simulation's clock and the shared store, each store call a turn."""
        config = load_config(
            env={}, projections=["board-reflect"],
            tail={"batch_size": 4, "young_gap_seconds": YOUNG_GAP, "poison_ticks": POISON_TICKS,
                  "seed": self.seed_mode, "token_save_seconds": TOKEN_EVERY},
            worker={"lease_seconds": LEASE, "max_attempts": self.max_attempts, "batch_size": 3,
                    "backoff_base_seconds": 0.5, "backoff_cap_seconds": 4,
                    # the real-time heartbeat is off: pass_time beats
                    "heartbeat_fraction": 0, "max_execution_seconds": MAX_EXECUTION,
                    # nor does the real-time mark flush run: a turn is one store call per
                    # replica at a time, and marks flush at each batch's end (a pass)
                    "mark_flush_seconds": 86400,
                    # nor do a batch's lanes run side by side (``lanes.py``): two tenants' rows
                    # at once would be two store calls at once
                    "concurrency": 1,
                    "steal_after_seconds": STEAL_AFTER, "reclaim_every_seconds": RECLAIM_EVERY},
            membership={"enabled": self.membership},
            # F2: one launch in flight per bot of a tenant, two per tenant: replicas launching
            # at once defer rows
            limits=F2.settings(slot_seconds=2 * LEASE))
        service = Service(self._stores(rid), config, clock=self.clock, rng=random.Random(rid),
                          member_id=f"r{rid}.{self.step}")
        service.resume.now = self.clock.now  # the token throttle runs on the simulation's clock
        # a done mark riding out an outage waits in simulation turns, not in real seconds: the
        # driver moves the clock (and ends the outage) between its tries
        service.worker.completer.pause = _no_pause
        if HEARTBEAT:
            # the hand-off beats its waiting rows on the simulated heartbeat's period: between
            # batches at the worker's ticks, during a batch with the heartbeat (``pass_time``)
            service.worker._handoff.heartbeat_fraction = HEARTBEAT_FRACTION
        reg = service.registry
        reg.register("launch", _Tracking(reg.handler("launch"), self, rid), replace=True)
        service.add_projection(Fragile())
        if self.tail_cls is not Tail:  # a deliberately broken tail (the self-tests)
            t = service.tail
            service.tail = self.tail_cls(events=t.events, cursors=t.cursors, outbox=t.outbox,
                                         subs=t.subs, cards=t.cards, clock=self.clock,
                                         settings=config.tail, projections=t.projections,
                                         kinds=t.kinds)
        return service

    async def _replica(self, rid: int) -> None:
        try:
            while True:
                service = self._service(rid)
                self.services[rid] = service
                self.marks.new_service(rid)
                self.changes[rid] = []
                self.delivered.pop(rid, None)
                self.token_writes.pop(rid, None)
                self.token_saved_at.pop(rid, None)  # a new process: its first save is due at once
                crashed = False
                with anyio.CancelScope() as self.stops[rid]:  # a hard stop cancels it
                    try:
                        with contextlib.suppress(StoreUnavailable):  # the waker retries; so do we
                            await service.resume.load()  # where the stream resumes (S4)
                        # the stream opens after the token it resumes from
                        start = service.resume.token or 0
                        self.changes[rid] = [c for c in self.changes[rid] if c.token > start]
                        while True:
                            if service.stopping:
                                await self._graceful_stop(rid, service)
                                break
                            # the passes of the loops ``run`` runs: heartbeat, stream changes (the
                            # throttled token save), the drain pass (the poll net when nothing
                            # woke a tenant, as the poll interval would), the worker's tick_any
                            if rid in self.split:  # a split view, as a heartbeat would have read it
                                if service.ownership.set_members(self.split.pop(rid)):
                                    service.request_full_poll()
                            elif (self.membership and rid not in self.frozen
                                    and self.silent.get(rid, -1) < self.step):
                                await service.membership_pass()
                            changes, self.changes[rid] = self.changes[rid], []
                            for change in changes:
                                service.on_change(change)
                                self.delivered[rid] = change.token
                                # a refused save interrupts the stream: it reopens from the token
                                # reached (the waker's StoreUnavailable path), the rest follows
                                with contextlib.suppress(StoreUnavailable):
                                    await service.resume.save()
                            full = (service.poll_requested or not service.woken
                                    or self.d.choose(4) == 0)
                            await service.drain_pass(full)
                            await service.work_pass()
                            # a pass with nothing to do may make no store call: park here, so
                            # that the loop waits its turn (a crash here is a crash too)
                            self.marks.at_turn(rid, service)
                            if (await self.turns.turn(rid, IDLE)).startswith("crash"):
                                self.note_crash(rid, IDLE, "before")
                                raise Crash(IDLE)
                    except Crash:
                        self.log(f"replica {rid} crashed and restarts")
                        crashed = True
                # what it launched and never marked: excused only if it was killed (a hard
                # stop ran its shielded clean-up: the closing flush)
                self.marks.service_ended(rid, service, killed=crashed)
                if crashed or self.stops[rid].cancelled_caught:  # its launch is gone with it
                    self.current_row.pop(rid, None)
                    self.launch_open.pop(rid, None)
        finally:
            self.turns.running -= 1

    async def _graceful_stop(self, rid: int, service: Service) -> None:
        """``stop``: the worker has stopped claiming; on the way out the last token the stream
        delivered is saved (whatever the throttle says) and the member leaves. It restarts."""
        self.save_faulted.discard(rid)
        await service.release_handed()
        await service.save_position()
        await service.ownership.leave()
        last = self.delivered.get(rid)
        if last is not None and self.token_writes.get(rid) != last:
            if rid in self.save_faulted:
                self.report.residual["token not saved at stop: the store refused the save"] += 1
            else:
                self.live_violations.append(
                    f"[token-not-saved] replica {rid} stopped; its stream had delivered token "
                    f"{last} but the last token it saved is {self.token_writes.get(rid)}")
        self.report.covered["graceful stops"] += 1
        self.log(f"replica {rid} stopped gracefully and restarts")

    # --- the world ------------------------------------------------------------------------

    async def setup(self) -> None:
        b = self.store.stores
        prepare = getattr(self.store, "prepare", None)
        if prepare is not None:
            await prepare()
        if self.seed_mode is None:
            self.seed_mode = SEED_MODES[self.d.choose(len(SEED_MODES))]
        for t in self.tenants:
            specs = [
                (f"{t}.created", MatchRule(event_types=("card.created",)), ()),
                (f"{t}.review", MatchRule(column="review"), ()),
                (f"{t}.ship", MatchRule(event_types=("card.labeled",)), ("ship",)),
                # its bot runner refuses every launch: a permanent outage, its rows must park
                (f"{t}.broken", MatchRule(event_types=("card.moved",)), ()),
            ]
            for sid, rule, consume in specs:
                bot = sid.split(".")[1]
                sub = Subscription(sub_id=sid, tenant_id=t, bot=bot, rule=rule,
                                   consume_labels=consume, max_per_second=F2.rate_of(bot))
                await b.subs.put(sub)
                self.subs[sid] = sub
            # History from before the service ran: two inserted events, and the highest
            # allocated seq still being inserted (a slow insert). ``earliest`` must replay the
            # history; ``latest`` seeds at the highest INSERTED seq, so the slow one is read.
            for kind in ("emit", "emit", "emit_slow"):
                await self._emit(kind, t, quiet=True)
        F2.plant(self.put_limit_doc, self.tenants, self.clock.now())
        self.log(f"seed mode {self.seed_mode}; history per tenant: 1, 2 inserted, 3 slow")

    def _new_event(self, tenant: str | None = None) -> tuple[str, int, str, str, Card]:
        t = tenant or self.tenants[self.d.choose(len(self.tenants))]
        self.n_cards += 1
        card_id = f"c{self.n_cards}"
        etype = ("card.created", "card.moved", "card.labeled")[self.d.choose(3)]
        column = ("inbox", "review")[self.d.choose(2)]
        labels = ("ship",) if etype == "card.labeled" else ()
        card = Card(tenant_id=t, card_id=card_id, column=column, labels=labels)
        seq = self.store.allocate(t)
        return t, seq, card_id, etype, card

    async def env_action(self, action: str) -> None:
        b = self.store.stores
        self.report.env[action] += 1
        if action in ("emit", "emit_slow"):
            await self._emit(action)
        elif action == "finish_slow" and self.slow:
            t, seq, etype = self.slow.pop(0)
            self._insert(t, seq, self.events[(t, seq)].card, etype)
            self.log(f"slow insert lands {t}/{seq}")
        elif action == "tick":
            await self.pass_time(1.0)
        elif action == "jump":
            await self.pass_time((5.0, 11.0, 31.0)[self.d.choose(3)])  # past the lease, the young gap
            self.log(f"clock jump -> {self.clock.now():.0f}")
        elif action == "edit_sub":
            sid = sorted(self.subs)[self.d.choose(len(self.subs))]
            if sid in self.deleted_subs:
                return
            old = self.subs[sid]
            if self.d.choose(3) == 0:  # disabled: none of its rows may launch from now on
                new = msgspec.structs.replace(old, enabled=False)
            else:
                new = msgspec.structs.replace(old, rule=MatchRule(event_types=("card.moved",)))
            await b.subs.put(new)
            self.subs[sid] = new
            self.edited_subs.add(sid)
            self.log(f"edit {sid} (enabled={new.enabled})")
        elif action == "delete_sub":
            sid = sorted(self.subs)[self.d.choose(len(self.subs))]
            await b.subs.delete(sid)
            self.deleted_subs.add(sid)
            self.log(f"delete {sid}")
        elif action == "delete_card" and self.events:
            key = sorted(self.events)[self.d.choose(len(self.events))]
            info = self.events[key]
            await b.cards.delete(info.tenant, info.card)
            self.deleted_cards.add((info.tenant, info.card))
            self.log(f"delete card {info.tenant}/{info.card}")
        elif action == "outage":
            # the bot runner refuses the next launch attempts: enough to dead-letter some rows.
            # Finite, so it also ends by itself in the settling phase.
            self.outage_left = 2 * self.max_attempts
            self.log("launcher outage begins")
        elif action == "member_leave":
            rid = self.d.choose(self.n_replicas)
            if rid in self.services:
                # it rejoins at its next beat
                await self.members.leave(self.services[rid].ownership.member_id)
                self.log(f"replica {rid} leaves the membership")
        elif action == "member_expire":
            rid = self.d.choose(self.n_replicas)
            self.silent[rid] = self.step + 40  # stops heartbeating; a clock jump expires it
            self.log(f"replica {rid} stops heartbeating")
        elif action == "split_view" and self.n_replicas >= 2:
            a = self.d.choose(self.n_replicas)
            b = (a + 1 + self.d.choose(self.n_replicas - 1)) % self.n_replicas
            if a in self.services and b in self.services:
                # each believes the other is gone: both own both's tenants
                # (adopted at each one's next pass, as a heartbeat's answer would be)
                others = [v.ownership.member_id for r, v in self.services.items() if r not in (a, b)]
                self.split[a] = self.split[b] = others
                self.frozen |= {a, b}
                self.log(f"split view: replicas {a} and {b} each think the other is gone")
        elif action == "poison":
            t = self.tenants[self.d.choose(len(self.tenants))]
            seq = self.store.allocate(t)
            self.store.insert({"tenant_id": t, "seq": seq, "type": 7})  # no card_id, bad type
            self.events[(t, seq)] = EventInfo(t, seq, "", "poison", self.step)
            self.log(f"poison {t}/{seq}")
        elif action == "cross_tenant":
            await self._plant_cross_tenant()
        elif action == "stall":
            self.stall_armed = True
        elif action == "slow_marks":
            self.slow_marks_armed = True
        elif action == "stop":
            rid = self.d.choose(self.n_replicas)
            how = self.d.choose(8)
            if how == 0:  # a hard stop: the service's task group cancelled
                await self._hard_stop(rid)
            elif how == 1:  # the next replica resumed mid-launch (its slots held: the shield)
                self.stop_armed = True
            elif how == 2:  # the next replica resumed with done marks staged (the closing
                self.stop_staged = True  # flush is shielded: they are written all the same)
            elif rid in self.services:
                self.services[rid].stop()  # graceful: it leaves at its next pass, then restarts
                self.log(f"replica {rid} is asked to stop")

    async def _stall(self, rid: int) -> None:
        """A replica freezes past its leases (a long GC pause, a frozen VM): it neither moves
        nor beats while the clock moves on past its leases, and the others reclaim what it
        held; ``STALL_STEPS`` later it thaws, its heartbeat first. The ``stall`` action arms it
        for the next replica resumed mid-launch or at its flush: what it holds is what is
        tested (a launch's slots, staged done marks)."""
        self.stalled[rid] = self.step + STALL_STEPS
        self.stalled_rows |= self.launch_open.get(rid, set())
        if rid in self.current_row:
            self.stalled_rows.add(self.current_row[rid])
        self.report.covered["replicas stalled past their leases"] += 1
        self.log(f"replica {rid} stalls at {self.turns.parked[rid][1]}")
        await self.pass_time(LEASE + 1.0)

    async def _slow_mark(self, rid: int) -> None:
        """One bulk done-mark write of ``rid`` meets a slow store: it waits for its op timeout
        (the clock moves, the heartbeats beat) and fails."""
        if rid not in self.slow_marks:
            self.slow_marks_armed = False
            self.slow_marks[rid] = SLOW_MARK_TRIES
            self.log(f"replica {rid}'s bulk marks meet a slow store")
        self.slow_marks[rid] -= 1
        if not self.slow_marks[rid]:
            del self.slow_marks[rid]
        self.report.faults["bulk marks timed out"] += 1
        await self.pass_time(OP_TIMEOUT)
        if rid in self.turns.parked:  # not cut meanwhile
            self.turns.resume(rid, "transient")

    async def _thaw(self) -> None:
        """Stalled replicas whose time is up move again; the heartbeat, its own task, beats
        first (a lease lost meanwhile is found lost, and stops what rides on it)."""
        for rid in [r for r, until in sorted(self.stalled.items()) if until <= self.step]:
            del self.stalled[rid]
            if rid in self.services:
                await self._beat(rid, self.services[rid].worker)
            self.log(f"replica {rid} thaws")

    async def _hard_stop(self, rid: int) -> None:
        """A hard stop (the service's task group cancelled): the replica is cancelled where it
        waits -- the call it waits for is not made, as with a crash before it -- runs its
        shielded clean-up (an in-flight slot's release, F2; the closing flush), and restarts."""
        parked = self.turns.parked.get(rid)
        if rid not in self.stops or parked is None:
            return
        self.report.faults["hard stop"] += 1
        self.note_crash(rid, parked[1], "before")
        self.stops[rid].cancel()
        await self._let_cancelled_run()
        self.log(f"replica {rid} hard-stopped at {parked[1]}")

    async def _let_cancelled_run(self) -> None:
        """Replicas just cancelled where they wait run their clean-up until they wait again."""
        await anyio.lowlevel.checkpoint()
        await self.turns.wait_all_parked()

    async def _emit(self, action: str, tenant: str | None = None, quiet: bool = False) -> None:
        t, seq, card_id, etype, card = self._new_event(tenant)
        await self.store.stores.cards.put(card)
        self.events[(t, seq)] = EventInfo(t, seq, card_id, "normal", allocated_at=self.clock.now())
        if action == "emit":
            self._insert(t, seq, card_id, etype)
        else:
            self.slow.append((t, seq, etype))
        if not quiet:
            self.log(f"{action} {t}/{seq} {etype} {card.column} {card.labels}")

    async def _plant_cross_tenant(self) -> None:
        """A row of one tenant naming another tenant's subscription (planted), or a subscription
        moved to another tenant (its rows already materialized now name a foreign one). Neither
        may ever launch."""
        b = self.store.stores
        t = self.tenants[self.d.choose(len(self.tenants))]
        other = next(x for x in self.tenants if x != t)
        if self.d.choose(2) == 0:
            sub = self.subs[f"{other}.created"]
            if sub.sub_id in self.moved_subs:
                return
            self.planted_subs.add(sub.sub_id)
            self.n_cards += 1
            card = Card(tenant_id=t, card_id=f"c{self.n_cards}", column="inbox")
            await b.cards.put(card)
            ev = EventSnapshot(seq=10_000 + self.n_cards, type="card.created",
                               card_id=card.card_id, column="inbox")
            row = new_launch_row(t, ev, sub, self.clock.now())
            await b.outbox.upsert_rows([row])
            self.planted.add(row.row_key)
            self.log(f"plant cross-tenant row {row.row_key}")
        else:
            sid = f"{t}.created"
            if sid in self.deleted_subs or sid in self.moved_subs or sid in self.planted_subs:
                return
            old = self.subs[sid]
            new = Subscription(sub_id=sid, tenant_id=other, bot=old.bot, rule=old.rule,
                               consume_labels=old.consume_labels, enabled=old.enabled)
            await b.subs.put(new)
            self.subs[sid] = new
            self.moved_subs.add(sid)
            self.edited_subs.add(sid)
            self.log(f"move subscription {sid} to tenant {other}")

    async def pass_time(self, seconds: float) -> None:
        """Time passes; while it does, each replica's lease heartbeat (O4) beats every
        ``LEASE * HEARTBEAT_FRACTION`` (``_beat``). A stalled replica does not beat."""
        step = LEASE * HEARTBEAT_FRACTION
        left = seconds
        while left > 0:
            d = min(step, left)
            self.clock.advance(d)
            left -= d
            if self.limits.fire():  # F2: the launches whose slots ended now are cut here
                await self._let_cancelled_run()
            for rid, service in sorted(self.services.items()) if HEARTBEAT else []:
                if self.services.get(rid) is not service:
                    continue  # restarted meanwhile (a cut launch's clean-up ran): gone
                if rid in self.stalled:
                    self.marks.before_beat(rid, service.worker._handoff.leases)
                    self.report.faults["heartbeat stalled"] += 1
                    continue
                await self._beat(rid, service.worker)

    async def _beat(self, rid: int, worker: Any) -> None:
        """One beat of a replica's heartbeat, as its batch's heartbeat beats: the leases in
        flight, and the handed rows' whose lease ends within two beats (``HandoffQueue.due``)
        -- the worker's own ``extend``, on the store directly (not a turn: the heartbeat is its
        own task). A beat fails like any store call, at the fault rate;
        ``max_execution_seconds`` still stops it."""
        waiting = worker._handoff
        self.marks.before_beat(rid, waiting.leases)
        beating = list(worker.inflight.values()) + waiting.due(self.clock.now())
        for lease in beating:
            if rid not in self.services or self.services[rid].worker is not worker:
                return  # restarted meanwhile (a cut launch's clean-up ran on): gone
            if self.faults_on and self.d.choose(100) < self.fault_percent:
                self.report.faults["heartbeat beat failed"] += 1
                continue
            # the worker's beat (``Leases.extend_many``) over the store directly, through a
            # ``Leases`` of its own: the worker's outbox stays the replica's turns (a launch
            # cut by its slot's end runs on meanwhile, and its calls wait their turns)
            beat = Leases(outbox=self.store.stores.outbox, clock=self.clock,
                          lease_seconds=worker._leases.lease_seconds,
                          max_execution_seconds=worker._leases.max_execution_seconds)
            beat.inflight = worker.inflight
            # a beat renews the launch's in-flight slots too (F2): on the store as well
            gate = _gate(worker)
            slots_via = None if gate is None else gate.store
            if gate is not None and self.limit_store is not None:
                gate.store = self.limit_store
            before, was = self.store.row_by_ref(lease.claim.ref), lease.until
            self.marks.riding = lease
            try:
                await beat.extend_many([lease])
                self.limits.beat(lease)
            finally:
                self.marks.riding = None
                if gate is not None and slots_via is not None:
                    gate.store = slots_via
            current = rid in self.services and self.services[rid].worker is worker
            if lease.until != was and current:  # its write landed (and the replica lives on)
                self.marks.landed(rid, "a heartbeat beat", lease.claim.ref,
                                  lease.claim.claim_id, before, fence_checked=False)
        self.marks.after_beat(waiting.leases, {id(x) for x in beating})

    def _insert(self, t: str, seq: int, card_id: str, etype: str) -> None:
        self.store.insert({"tenant_id": t, "seq": seq, "type": etype,
                                        "card_id": card_id, "at": self.clock.now()})
        # each replica's change stream: every insert but those of the tenants it leaves out (S5)
        self.n_tokens += 1
        for rid, service in self.services.items():
            if t not in service.stream_exclude and rid in self.changes:
                self.changes[rid].append(Change(tenant_id=t, seq=seq, token=self.n_tokens))
        self.events[(t, seq)].inserted_step = self.step
        self.events[(t, seq)].inserted_at = self.clock.now()

    def _record_cursors(self) -> None:
        for t, cur in self.store.cursors().items():
            for (tt, seq), _info in self.events.items():
                if tt == t and seq <= cur and (t, seq) not in self.cursor_passed:
                    self.cursor_passed[(t, seq)] = self.step
                    self.cursor_passed_at[(t, seq)] = self.clock.now()

    async def _one_step(self, allow_env: bool) -> None:
        await self.turns.wait_all_parked()
        self.step += 1
        self.report.steps += 1
        self._record_cursors()
        if self.stalled:
            await self._thaw()
        parked = sorted(r for r in self.turns.parked if r not in self.stalled)
        if allow_env and self.d.choose(4) == 0:
            disarm = getattr(self.store, "disarm", None)
            if disarm is not None:  # the world's own writes are never the wire faults' target
                disarm()
            await self.env_action(self.env_actions[self.d.choose(len(self.env_actions))])
            return
        if not parked:
            return
        rid = parked[self.d.choose(len(parked))]
        if self.stop_armed and self.turns.parked[rid][1] in MID_LAUNCH:
            self.stop_armed = False
            await self._hard_stop(rid)
            return
        if self.stall_armed and self.turns.parked[rid][1] in (*MID_LAUNCH, BULK_DONE):
            self.stall_armed = False
            await self._stall(rid)
            return
        if self.stop_staged and rid in self.services and \
                self.services[rid].worker.completer.pending_marks:
            self.stop_staged = False
            await self._hard_stop(rid)
            return
        if self.turns.parked[rid][1] == BULK_DONE and self.faults_on and (
                self.slow_marks_armed or rid in self.slow_marks):
            await self._slow_mark(rid)
            return
        fault = "none"
        if self.faults_on and self.d.choose(100) < self.fault_percent:
            fault = FAULT_KINDS[1 + self.d.choose(3)]
            self.report.faults[fault] += 1
        between = getattr(self.store, "between_turns", None)
        if between is not None:  # the wire store arms real failpoints on the server
            armed = between(self.d.choose, self.faults_on)
            if armed:
                self.report.faults[armed] += 1
                self.log(armed)
        point = self.turns.resume(rid, fault)
        if fault != "none":
            self.log(f"replica {rid} {point}: {fault}")

    def _runaway(self) -> bool:
        """A row far past its attempt budget will not settle: stop early (check reports it)."""
        return any(int(d.get("attempts") or 0) > self.max_attempts + 2
                   for d in self.store.row_docs())

    def _settled(self) -> bool:
        if self.slow:
            return False
        for d in self.store.row_docs():
            if d.get("state") in ("pending", "claimed"):
                return False
        cursors = self.store.cursors()
        for t in self.tenants:
            if cursors.get(t, 0) < max(
                    (s for (tt, s) in self.events if tt == t), default=0):
                return False
        return True

    async def run(self, max_steps: int = 400) -> Report:
        with self.limits.sim_time():
            await self._run(max_steps)
        if self.hung:
            self.report.violations.append(
                f"[hung] the schedule did not finish within {self.wall_seconds:g} s of real time "
                f"(stuck at step {self.step}; parked: {sorted(self.turns.parked)})")
            return self.report
        # F2: checked once every replica has stopped (their releases made, shielded)
        self.report.violations += self.limits.finish()
        return self.report

    async def _watchdog(self, scope: anyio.CancelScope) -> None:
        """Ends a schedule stuck past ``wall_seconds`` of real time (see SCHEDULE_SECONDS)."""
        await anyio.sleep(self.wall_seconds)
        self.hung = True
        self.turns.close()  # a replica's shielded clean-up waits for no turn now
        scope.cancel()

    async def _run(self, max_steps: int) -> None:
        await self.setup()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watchdog, tg.cancel_scope)
            for rid in range(self.n_replicas):
                self.turns.start()  # counted before it first runs: the driver waits for it
                tg.start_soon(self._replica, rid)
            while not self.d.exhausted and self.step < max_steps:
                await self._one_step(allow_env=True)
            # Faults stop; the world stops changing; slow inserts land; everything settles.
            self.faults_on = False
            self.frozen.clear()  # views heal: every replica heartbeats again
            self.split.clear()
            self.silent.clear()
            self.slow_marks.clear()
            for rid in self.stalled:
                self.stalled[rid] = self.step  # every stalled replica thaws at the next step
            while self.slow:
                await self.env_action("finish_slow")
            for i in range(20_000):
                await self._one_step(allow_env=False)
                if i % 50 == 49:
                    # time passes only while every replica waits its turn (the step above
                    # resumed one: a beat racing its calls would see their writes as its own)
                    await self.turns.wait_all_parked()
                    await self.pass_time(YOUNG_GAP + 1)  # expire leases and gaps, pass backoffs
                    if self._settled() or self._runaway():
                        break
            await self.turns.wait_all_parked()
            self._record_cursors()
            self.check()  # before the clean-up below touches the store
            self.turns.close()
            tg.cancel_scope.cancel()
        close = getattr(self.store, "close", None)
        if close is not None:
            await close()

    # --- invariants -------------------------------------------------------------------------

    def check(self) -> None:
        r = self.report
        v = r.violations
        v += self.live_violations
        docs = self.store.row_docs()
        self.marks.finish(docs)
        v += self.marks.violations
        r.residual.update(self.marks.residual)
        rows: dict[str, dict[str, Any]] = {}
        for d in docs:
            if d["row_key"] in rows:
                v.append(f"[duplicate-row] duplicate row {d['row_key']}")
            rows[d["row_key"]] = d
        r.rows = len(rows)
        if not self._settled():
            live = [k for k, d in rows.items() if d.get("state") in ("pending", "claimed")]
            v.append(f"[not-settled] did not settle: {len(live)} live rows {live[:3]}, "
                     f"slow={self.slow}, cursors={self.store.cursors()}")
        launches = Counter(req.row_key for req in self.launcher.launches)
        r.launches = sum(launches.values())
        r.dead_letters = sum(1 for d in docs if d.get("state") == "failed")
        latest = self.seed_mode == "latest"

        for (t, seq), info in sorted(self.events.items()):
            proj = projection_row_key(t, seq, "board-reflect")
            passed = self.cursor_passed.get((t, seq))
            if passed is None:
                continue  # reported by "did not settle"
            if latest and seq <= self.seeded.get(t, 0):
                if proj in rows:
                    v.append(f"[seed] {t}/{seq}, before the latest seed, has a row")
                r.residual["skipped: before the latest seed"] += 1
                continue
            if info.kind == "poison":
                if proj in rows:
                    v.append(f"[poison-row] poison event {t}/{seq} has a row")
                ticks = max((n for (_rid, tt, sq), n in self.head_reads.items()
                             if tt == t and sq == seq), default=0)
                if ticks < POISON_TICKS:
                    v.append(f"[poison-early] poison {t}/{seq} skipped after {ticks} head-of-line "
                             f"ticks of one replica (poison_ticks={POISON_TICKS})")
                continue
            card_gone = (t, info.card) in self.deleted_cards
            dead_alloc = info.inserted_step is None or info.inserted_step >= passed
            # a slow store: the insert landed after the young-gap window, so the gap was
            # (rightly) stepped over as a dead allocation -- ADR-094's accepted loss
            too_slow = (info.inserted_at is not None
                        and info.inserted_at - info.allocated_at >= YOUNG_GAP)
            if proj not in rows:
                if card_gone:
                    r.residual["skipped: card deleted before materialization"] += 1
                elif dead_alloc:
                    age = self.cursor_passed_at[(t, seq)] - info.allocated_at
                    if age < YOUNG_GAP:
                        v.append(f"[young-gap-stepped] cursor stepped over {t}/{seq} {age:.0f}s "
                                 f"after its allocation (young gap window {YOUNG_GAP:.0f}s)")
                    else:
                        r.residual["skipped: dead allocation (never inserted before the cursor)"] += 1
                elif too_slow:
                    r.residual["lost: insert slower than the young-gap window"] += 1
                else:
                    v.append(f"[lost-event] cursor passed {t}/{seq} without a row (inserted at step "
                             f"{info.inserted_step}, passed at {passed})")
                continue
            # launch rows: static subscriptions must have their row, exactly once
            ev = rows[proj]["event"]
            for sid, sub in self.subs.items():
                if sub.tenant_id != t or sid in self.edited_subs or sid in self.deleted_subs:
                    continue
                if _matches_initial(sid, ev) and launch_row_key(t, seq, sid) not in rows:
                    v.append(f"[missing-row] missing row {launch_row_key(t, seq, sid)}")

        for key, d in rows.items():
            attempts = int(d.get("attempts") or 0)
            if attempts > self.max_attempts:
                # An attempt past the budget that ran the handler is a violation. A reclaim
                # whose own call stalled past the lease it set (a slow round trip: its ``now``
                # is older than the write) counts an expired lease the next reclaim counts
                # again: the counter passes the budget, nothing runs, the row parks.
                ran_past = [e for e in d.get("errors") or []
                            if int(e.get("attempt") or 0) > self.max_attempts
                            and e.get("kind") not in ("lease_expired", "permanent")]
                if ran_past or d.get("state") != "failed":
                    v.append(f"[budget] row {key} has {attempts} attempts, budget "
                             f"{self.max_attempts}")
                else:
                    r.residual["attempts counted past the budget by a stalled reclaim (not run)"] += 1
            if d.get("projection") == FRAGILE:
                self._check_fragile(key, d, attempts)
            if d.get("kind", "launch") != "launch":
                continue
            n = launches.get(key, 0)
            outcome = str(d.get("outcome") or "")
            sid = d.get("sub_id")
            foreign = key in self.planted or sid in self.moved_subs
            if key in self.planted and d.get("state") != "failed" and not (
                    sid in self.deleted_subs and outcome == "dropped: subscription deleted"):
                v.append(f"[cross-tenant] planted cross-tenant row {key} ended {d.get('state')} "
                         f"({outcome}), not refused")
            if d.get("state") == "failed" and attempts < self.max_attempts and not foreign:
                v.append(f"[parked-early] row {key} dead-lettered after {attempts} attempts "
                         f"(budget {self.max_attempts}): {d.get('errors', [{}])[-1]}")
            if n > 1:
                if key in self.window2:
                    r.residual["double launch: crash between launch and mark_done"] += 1
                elif key in self.stalled_rows:
                    r.residual["double launch: its replica stalled past its lease"] += 1
                elif key in self.window2_lease:
                    r.residual["double launch: lease expired between launch and mark_done"] += 1
                else:
                    v.append(f"[double-launch] row {key} launched {n} times outside the residual "
                             f"window")
            if d.get("state") == "done" and outcome.startswith("launched") and n == 0:
                v.append(f"[phantom-launch] row {key} says launched but nothing was launched")
            static = sid not in self.edited_subs and sid not in self.deleted_subs
            card_gone = (d["tenant_id"], d["event"]["card_id"]) in self.deleted_cards
            if static and sid and sid.endswith(".broken") and d.get("state") != "failed":
                v.append(f"[outage-not-parked] row {key} of a permanently refused bot ended "
                         f"{d.get('state')} ({outcome})")
            if static and not card_gone and d.get("state") == "done" and n == 0:
                if outcome == "skipped: labels already consumed":
                    # ADR-094 accepts this after a crash between consume and consume_marked;
                    # the per-row consume record closes that window, so here it is a bug.
                    why = ("after a crash between consume and consume_marked"
                           if key in self.window1 else
                           "after a lease loss there" if key in self.window1_lease else "")
                    v.append(f"[one-shot-lost] row {key}: its one-shot was spent but it never "
                             f"launched {why}")
                else:  # a static subscription, a live card: nothing may drop the launch
                    v.append(f"[no-launch] row {key} done ({outcome}) without a launch")
            if d.get("state") == "failed" and n > 0:
                r.residual["dead-lettered after launching"] += 1
            spent = self.consumed[(d["tenant_id"], d["event"]["card_id"])]
            one_shot = bool(sid and sid.endswith(".ship") and static and not card_gone)
            if one_shot and d.get("state") == "done" and spent != 1:
                v.append(f"[one-shot-count] one-shot of {key} consumed {spent} times")
        for key, n in self.consumed.items():
            if n > 1:
                v.append(f"[labels-consumed-twice] labels of card {key} consumed {n} times")
        for key in self.cross_tenant:
            v.append(f"[cross-tenant] cross-tenant execution of {key}")


    def _check_fragile(self, key: str, d: dict[str, Any], attempts: int) -> None:
        """A projection that raises on an event parks its row after the whole attempt budget
        (never before, never done); its other rows are done."""
        bad = Fragile.fails(str(d["event"]["card_id"]))
        state = d.get("state")
        if bad and (state != "failed" or attempts < self.max_attempts):
            self.report.violations.append(
                f"[projection-failure] row {key} of a projection that always raises on its event "
                f"ended {state} after {attempts} attempts (budget {self.max_attempts})")
        elif bad:
            self.report.covered["fragile rows parked"] += 1
        elif state != "done":
            self.report.violations.append(
                f"[projection-failure] row {key} of a projection that succeeds on its event "
                f"ended {state} ({d.get('outcome')})")


class Fragile:
    """A projection plugin that raises on the events of every fifth card (a bug in a plugin);
    its batched apply raises when any event of the batch is one (then each row runs alone)."""

    name = FRAGILE

    @staticmethod
    def fails(card_id: str) -> bool:
        digits = card_id.lstrip("c")
        return digits.isdigit() and int(digits) % 5 == 0

    async def apply(self, tenant_id: str, event: EventSnapshot) -> str:
        await anyio.lowlevel.checkpoint()
        if self.fails(event.card_id):
            raise ValueError(f"fragile projection cannot apply card {event.card_id}")
        return "recorded"

    async def apply_many(self, tenant_id: str, events: Sequence[EventSnapshot]) -> list[str]:
        return [await self.apply(tenant_id, ev) for ev in events]

    async def reset(self, tenant_id: str) -> None:
        await anyio.lowlevel.checkpoint()


def _matches_initial(sid: str, ev: dict[str, Any]) -> bool:
    """What each static subscription of ``setup`` matches (before any edit)."""
    kind = sid.split(".", 1)[1]
    if ev.get("deleted"):
        return False
    if kind == "created":
        return bool(ev["type"] == "card.created")
    if kind == "review":
        return bool(ev["column"] == "review")
    if kind == "broken":
        return bool(ev["type"] == "card.moved")
    return bool(ev["type"] == "card.labeled" and "ship" in ev.get("labels", []))


async def _no_pause(_seconds: float) -> None:
    await anyio.lowlevel.checkpoint()


def _gate(worker: Any) -> Any:
    """The launch gate (F2) of a replica's worker, under the ``_Tracking`` wrapper; None without
    limits."""
    handler = worker.registry.handler("launch")
    return getattr(getattr(handler, "inner", handler), "gate", None)


class _Tracking:
    """Wraps the launch handler to know which row a replica is executing (for attribution)."""

    def __init__(self, inner: Any, sim: Simulation, rid: int) -> None:
        self.inner, self.sim, self.rid = inner, sim, rid

    async def execute(self, row: EffectRow, ctx: ExecutionContext) -> str:
        self.sim.current_row[self.rid] = row.row_key
        return str(await self.inner.execute(row, ctx))


def quiet() -> None:
    """The service logs every injected fault; a 10,000-schedule run wants only the counts."""
    import logging

    logging.getLogger("board_outbox").setLevel(logging.CRITICAL)


def run_schedule(seed: int, steps: int = 300, replicas: int | None = None,
                 trace: bool = False, tail_cls: type[Tail] = Tail, store: str = "memory",
                 membership: bool = True) -> Report:
    quiet()
    rng = random.Random(seed)
    n = replicas or rng.choice((2, 3, 4))
    mode = rng.choice(SEED_MODES)  # both seed modes are drawn
    sim = Simulation(RandomDecider(seed, steps), replicas=n, trace=trace, tail_cls=tail_cls,
                     store=store, seed_mode=mode, membership=membership)
    return anyio.run(sim.run)


def run_choices(choices: Sequence[int], replicas: int = 3, trace: bool = False,
                tail_cls: type[Tail] = Tail, fault_percent: int = 8) -> Report:
    quiet()
    sim = Simulation(ListDecider(choices), replicas=replicas, trace=trace, tail_cls=tail_cls,
                     fault_percent=fault_percent)
    return anyio.run(sim.run, len(choices) + 1)


def recorded_schedule(seed: int, steps: int = 300, replicas: int = 3,
                      tail_cls: type[Tail] = Tail) -> tuple[Report, list[int]]:
    """Run a seeded schedule and return its report and its choices, for ``shrink``."""
    quiet()
    d = RecordingDecider(seed, steps)
    sim = Simulation(d, replicas=replicas, tail_cls=tail_cls)
    return anyio.run(sim.run), d.record


def shrink(choices: Sequence[int], fails: Callable[[list[int]], bool]) -> list[int]:
    """Delta-debugging over the choice list: drop chunks, then zero choices (0 means "first
    option, no fault"), while the schedule still fails. Deterministic."""
    cur = list(choices)
    # first the shortest failing prefix by bisection (the run ends where its choices do, so a
    # short prefix is also a fast run); every kept candidate is checked to fail
    lo, hi = 1, len(cur)
    while lo < hi:
        mid = (lo + hi) // 2
        if fails(cur[:mid]):
            hi = mid
        else:
            lo = mid + 1
    if hi < len(cur) and fails(cur[:hi]):
        cur = cur[:hi]
    chunk = max(1, len(cur) // 2)
    while True:
        i, changed = 0, False
        while i < len(cur):
            cand = cur[:i] + cur[i + chunk:]
            if cand and fails(cand):
                cur, changed = cand, True
            else:
                i += chunk
        if not changed:
            if chunk == 1:
                break
            chunk //= 2
    for i in range(len(cur)):
        if cur[i] != 0:
            cand = [*cur[:i], 0, *cur[i + 1:]]
            if fails(cand):
                cur = cand
    while cur and cur[-1] == 0 and fails(cur[:-1]):
        cur.pop()
    return cur


def run_many(n: int, first_seed: int = 0, steps: int = 300,
             progress: Callable[[int, Report], None] | None = None,
             tail_cls: type[Tail] = Tail, store: str = "memory", membership: bool = True,
             stop_at_first: bool = False) -> Report:
    """``n`` seeded schedules from ``first_seed``; ``stop_at_first``: stop after the first
    that reports a violation (a run that must be clean fails fast on a broken build)."""
    total = Report(schedules=0)
    for i in range(n):
        rep = run_schedule(first_seed + i, steps, tail_cls=tail_cls, store=store,
                           membership=membership)
        if rep.violations:
            rep.violations = [f"seed {first_seed + i}: {x}" for x in rep.violations]
        total.add(rep)
        if progress is not None:
            progress(i + 1, total)
        if stop_at_first and rep.violations:
            break
    return total

