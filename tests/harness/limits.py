"""The launch gate's limits (F2) in the simulation, counted from outside the gate.

``sim.py`` hooks this in at four places: every limit store call of every replica goes through
``LimitsWatch.store`` (below the turns, so the heartbeat's direct calls are seen too); the
launcher port reports each launch call (``launch_begins`` / ``launch_ends``); a deferral reports
the row before and after it (``deferred``); time passing fires the gates' bounds on the
simulation's clock (``fire``) and checks each beat renewed what it holds (``beat``).

The invariants, each reported as ``[kind] ...``:

- ``over-limit``: never more launches of a bot (a tenant's bot) or of a tenant in flight at once
  than its in-flight limit, counted from the runner's side: a launch is in flight from when its
  replica asks for the ``launcher.launch`` turn until that call returns, raises or is cancelled.
- ``deferral-attempt``: a row deferred by a limit keeps its attempt count.
- ``slot-leaked``: at the end, every slot acquired was released, unless every release of it was
  refused (an injected fault) or the gate never heard of it (a crash after the acquire): only
  those are left to end on their own.
- ``needless-deferral``: a limit refuses a launch only when the launches of that very bot (or
  tenant) hold its slots: the holders are counted by their rows, not by the key the gate built,
  and a slot counts while it is unreleased and its end (as its holder last renewed it) is ahead.
- ``over-rate``: no more takes per rate window than the rate allows.
- ``slot-lifetime``: a slot lives as long as its launch: every beat of a launch's lease renews its
  slots, and its launch is cut only once they have ended.
- ``slot-fence``: a renew moves its holder's slots and only those; a release frees its holder's
  slots and only those (read back from the store, like the marks' fence).

Time. The gate bounds a launch by its slot's end on the event loop's clock (``anyio``), which
in the simulation runs in real milliseconds while the simulated clock jumps: left alone, the
bound would never fire, and a launch parked past its slot's end would run on beside the next
holder's -- two in flight that production, where both clocks move together, cannot have. So
while a simulation runs, the gate module reads the simulated clock (``sim_time``) and the
driver fires each bound when the simulated clock reaches it (``fire``, right after the clock
moves, before anything else runs). The bound is then exact on the clock the slots end by, and
the in-flight count needs no allowance for launches whose slots ended: the gate has cut them
before any other replica runs.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio

from board_outbox.model.limits import bot_key, slot_id
from board_outbox.model.service_documents import LIMITS_COLLECTION

BOT_IN_FLIGHT = 1  # one launch in flight per bot of a tenant: replicas launching at once defer
TENANT_IN_FLIGHT = 2  # and two per tenant: a tenant's slots come two to a key
RATED_BOT = "ship"  # its subscriptions launch at most RATE per second (their own limit)
RATE = 1.0
GHOST_BOT = "created"  # t0's slot of this bot holds a planted ghost at the start (taken over)
EPS = 1e-6  # the gate's bound is until - now + now on floats: equal to until within this


def settings(slot_seconds: float) -> dict[str, Any]:
    """The ``[limits]`` section every replica runs with."""
    return {"bot_in_flight": BOT_IN_FLIGHT, "tenant_in_flight": TENANT_IN_FLIGHT,
            "wait_seconds": 0.5, "slot_seconds": slot_seconds}


def rate_of(bot: str) -> float | None:
    """A subscription's own ``max_per_second`` in the simulation's set-up."""
    return RATE if bot == RATED_BOT else None


def _window(per_second: float, now: float) -> tuple[float, int, int]:
    """(window length, window index, launches allowed in it), as the F2 spec counts a rate."""
    w = 1 if per_second >= 1 else math.ceil(1 / per_second - 1e-9)
    return w, math.floor(now / w), max(1, math.floor(per_second * w + 1e-9))


@dataclass
class _Slot:
    key: str
    holder: str
    tenant: str
    bot: str
    until: float
    renewed_at: float | None = None
    released: bool = False
    release_calls: int = 0  # reached the store
    refused: int = 0  # release turns faulted before the store
    # left to end on its own: its acquire crashed after the call (the gate never knew it held
    # the slot), or its replica crashed in the release loop before reaching it
    lost: bool = False


@dataclass
class _Launch:
    rid: int
    tenant: str
    bot: str
    row_key: str


@dataclass
class LimitsWatch:
    clock: Any
    bot_of: Callable[[str], str]  # sub_id -> its bot
    slot_docs: Callable[[str], dict[Any, dict[str, Any]]] | None = None  # key -> raw slot docs
    violations: list[str] = field(default_factory=list)
    covered: Counter[str] = field(default_factory=Counter)
    slots: dict[tuple[str, str], _Slot] = field(default_factory=dict)
    launches: dict[int, _Launch] = field(default_factory=dict)
    takes: Counter[tuple[str, float, int]] = field(default_factory=Counter)
    bounds: dict[int, tuple[Any, str | None, int]] = field(default_factory=dict)
    task_holder: dict[int, str] = field(default_factory=dict)
    lost: set[tuple[str, str]] = field(default_factory=set)  # acquires crashed after the call
    n: int = 0
    # told of every renewal that reached the store (key, holder): ``marks.MarksWatch.renewed``
    on_renew: Callable[[str, str], None] = lambda key, holder: None

    # --- who holds what ------------------------------------------------------------------

    def _who(self, holder: str) -> tuple[str, str]:
        """(tenant, bot) of the launch a holder (``<row_key>:<claim_id>``) stands for."""
        row_key = holder.rpartition(":")[0]
        tenant = row_key.split("/", 1)[0]
        sub_id = row_key.split("/sub/", 1)[1] if "/sub/" in row_key else ""
        return tenant, self.bot_of(sub_id)

    def _live(self, scope: str, tenant: str, bot: str, now: float, but: str) -> int:
        """Slots held now by launches of this bot (scope "bot") or tenant ("tenant")."""
        return sum(1 for s in self.slots.values()
                   if s.key.startswith(f"{scope}:") and s.holder != but and not s.released
                   and s.until > now and s.tenant == tenant and (scope == "tenant" or s.bot == bot))

    def store(self, inner: Any) -> _Watched:
        return _Watched(inner, self)

    def _acquired(self, key: str, limit: int, holder: str, until: float, now: float,
                  got: bool) -> None:
        tenant, bot = self._who(holder)
        scope = key.split(":", 1)[0]
        if got:
            self.slots[(key, holder)] = _Slot(key, holder, tenant, bot, until,
                                              lost=(key, holder) in self.lost)
            self.task_holder[_task()] = holder
            return
        want = BOT_IN_FLIGHT if scope == "bot" else TENANT_IN_FLIGHT
        live = self._live(scope, tenant, bot, now, holder)
        what = f"{tenant}/{bot}" if scope == "bot" else tenant
        self.covered[f"launches refused at the {scope} in-flight limit"] += 1
        if live < want:
            self.violations.append(
                f"[needless-deferral] {holder} refused a slot of {key} (limit {limit}) at "
                f"{now:.1f} while launches of {what} held {live} live slot(s) of its {want}")

    def _renewed(self, key: str, holder: str, until: float, kept: bool) -> None:
        s = self.slots.get((key, holder))
        if kept and s is not None:
            s.until, s.renewed_at = until, self.clock.now()
            self.covered["slots renewed by a beat"] += 1

    def _released(self, key: str, holder: str, done: bool) -> None:
        s = self.slots.get((key, holder))
        if s is not None:
            s.release_calls += 1
            s.released = s.released or done

    def _took(self, key: str, per_second: float, now: float, got: bool) -> None:
        w, i, allowed = _window(per_second, now)
        if not got:
            self.covered["launches refused at a rate"] += 1
            return
        self.takes[(key, w, i)] += 1
        if self.takes[(key, w, i)] > allowed:
            self.violations.append(
                f"[over-rate] {key} let {self.takes[(key, w, i)]} launches through in the "
                f"{w}s window from {i * w:.0f} ({per_second:g}/s allows {allowed})")

    def fence(self, what: str, key: str, holder: str, before: dict[Any, dict[str, Any]],
              after: dict[Any, dict[str, Any]], until: float | None, answer: bool | None) -> None:
        """A renew or release wrote only ``holder``'s slots of ``key``, and all of them."""
        mine = [i for i, d in before.items() if d.get("holder") == holder]
        for i, d in after.items():
            if i not in mine and before.get(i) != d:
                self.violations.append(
                    f"[slot-fence] {what} of {key} by {holder} wrote slot {i} held by "
                    f"{(before.get(i) or {}).get('holder')}")
        for i in mine:
            d = after.get(i, {})
            moved = d.get("until") == until if what == "renew" else d.get("holder") != holder
            if not moved:
                self.violations.append(f"[slot-fence] {what} of {key} by {holder} left its "
                                       f"slot {i} as it was ({d})")
        if what == "renew" and answer is not None and answer != bool(mine):
            self.violations.append(f"[slot-fence] renew of {key} by {holder} answered {answer} "
                                   f"while it held {len(mine)} slot(s)")

    # --- the ports' hooks -----------------------------------------------------------------

    def faulted(self, name: str, args: tuple[Any, ...], fault: str) -> None:
        """A fault injected at a limit store call of a replica."""
        if name == "acquire" and fault == "crash_after":  # the call is made, then it crashes
            self.lost.add((args[0], args[2]))
        if name == "release" and fault in ("transient", "crash_before"):
            s = self.slots.get((args[0], args[1]))
            if s is not None:
                s.refused += 1
        if name == "release" and fault.startswith("crash"):
            # the replica dies in its release loop: the holder's other slots are not given back
            for s in self.slots.values():
                if s.holder == args[1] and s.key != args[0] and not s.released:
                    s.lost = True

    def launch_begins(self, rid: int, req: Any) -> int:
        task = _task()
        if any(t == task and scope.cancel_called for scope, _h, t in self.bounds.values()):
            # cut already (its slot ended while it waited): cancelled as it asks for its turn,
            # it never reaches the runner
            self.covered["launches cut before they reached the runner"] += 1
            return 0
        self.n += 1
        mine = self.launches[self.n] = _Launch(rid, req.tenant_id, req.bot, req.row_key)
        bot = [x for x in self.launches.values() if (x.tenant, x.bot) == (mine.tenant, mine.bot)]
        tenant = [x for x in self.launches.values() if x.tenant == mine.tenant]
        self.covered["launches counted in flight"] += 1
        if len(tenant) == TENANT_IN_FLIGHT:
            self.covered["launches at the tenant's in-flight limit"] += 1
        for scope, who, n, limit in (("bot", f"{mine.tenant}/{mine.bot}", len(bot), BOT_IN_FLIGHT),
                                     ("tenant", mine.tenant, len(tenant), TENANT_IN_FLIGHT)):
            if n > limit:
                others = [x.row_key for x in (bot if scope == "bot" else tenant) if x is not mine]
                self.violations.append(
                    f"[over-limit] {n} launches of {scope} {who} in flight at once (limit "
                    f"{limit}): {mine.row_key} began beside {others}")
        return self.n

    def launch_ends(self, token: int) -> None:
        self.launches.pop(token, None)

    def deferred(self, before: dict[str, Any] | None, after: dict[str, Any] | None,
                 moved: bool) -> None:
        if not moved or before is None or after is None:
            return
        self.covered["deferrals checked"] += 1
        if int(after.get("attempts") or 0) != int(before.get("attempts") or 0):
            self.violations.append(
                f"[deferral-attempt] row {after.get('row_key')} deferred ({after.get('waiting')}) "
                f"with attempts {before.get('attempts')} -> {after.get('attempts')}")

    def beat(self, lease: Any) -> None:
        """After a beat of ``lease`` that held: the slots of the launch riding on it were renewed
        at this beat, unless they had already ended (then its bound cuts it)."""
        if lease.stopped or not lease.riders or lease.claim.row is None:
            return
        now = self.clock.now()
        prefix = f"{lease.claim.row.row_key}:{lease.claim.claim_id}"
        for s in self.slots.values():
            if s.holder == prefix and not s.released and s.until > now and s.renewed_at != now:
                self.violations.append(
                    f"[slot-lifetime] a beat of {lease.claim.row.row_key}'s lease at {now:.1f} "
                    f"did not renew its slot of {s.key} (ending {s.until:.1f})")

    # --- the bound on the simulated clock -------------------------------------------------

    @contextlib.contextmanager
    def sim_time(self) -> Iterator[None]:
        """While inside, the launch gate reads the simulated clock, and its bounds fire by
        ``fire`` (they are far in the event loop's future: they never fire by themselves)."""
        gate = sys.modules["board_outbox.engine.flow.limits"]
        real = gate.anyio
        setattr(gate, "anyio", _SimAnyio(self))  # noqa: B010 (a module's global, swapped)
        try:
            yield
        finally:
            setattr(gate, "anyio", real)  # noqa: B010

    def fire(self) -> int:
        """Cut every launch whose bound the simulated clock has reached; how many."""
        now, fired = self.clock.now(), 0
        for scope, holder, _task_id in list(self.bounds.values()):
            if scope.cancel_called or scope.deadline > now + EPS:
                continue
            ends = [s.until for s in self.slots.values() if s.holder == holder and not s.released]
            if ends and min(ends) > now + 1e-3:
                self.violations.append(
                    f"[slot-lifetime] the launch of {holder} was cut at {now:.1f}, its bound, "
                    f"while its slots were held until {min(ends):.1f}")
            scope.cancel()
            fired += 1
            self.covered["launches cut at their slot's end"] += 1
        return fired

    # --- the end --------------------------------------------------------------------------

    def finish(self) -> list[str]:
        """The violations found, with the slots left held once every replica has stopped."""
        for s in self.slots.values():
            if s.released:
                self.covered["slots released"] += 1
                continue
            if s.lost or (s.refused and not s.release_calls):
                self.covered["slots left to end on their own (crash or refused release)"] += 1
                continue
            self.violations.append(
                f"[slot-leaked] slot of {s.key} held by {s.holder} never released "
                f"({s.release_calls} release call(s) reached the store, {s.refused} refused)")
        return self.violations


def _task() -> int:
    return anyio.get_current_task().id


class _Watched:
    """The limit store as every replica and every beat uses it: each call accounted."""

    def __init__(self, inner: Any, watch: LimitsWatch) -> None:
        self._inner, self._w = inner, watch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def acquire(self, key: str, limit: int, holder: str, until: float, now: float) -> bool:
        got = bool(await self._inner.acquire(key, limit, holder, until, now))
        self._w._acquired(key, limit, holder, until, now, got)
        return got

    async def renew(self, key: str, holder: str, until: float) -> bool:
        docs = self._w.slot_docs
        before = docs(key) if docs else {}
        kept = bool(await self._inner.renew(key, holder, until))
        if docs:
            self._w.fence("renew", key, holder, before, docs(key), until, kept)
        self._w._renewed(key, holder, until, kept)
        self._w.on_renew(key, holder)
        return kept

    async def release(self, key: str, holder: str) -> None:
        docs = self._w.slot_docs
        before = docs(key) if docs else {}
        done = False
        try:
            await self._inner.release(key, holder)
            done = True
        finally:
            self._w._released(key, holder, done)
        if docs:
            self._w.fence("release", key, holder, before, docs(key), None, None)

    async def take(self, key: str, per_second: float, now: float) -> bool:
        got = bool(await self._inner.take(key, per_second, now))
        self._w._took(key, per_second, now, got)
        return got


class _SimAnyio:
    """``anyio`` as the launch gate sees it during a simulation: the simulated clock, and its
    cancel scopes (the launches' bounds) known to the driver."""

    def __init__(self, watch: LimitsWatch) -> None:
        self._w = watch

    def __getattr__(self, name: str) -> Any:
        return getattr(anyio, name)

    def current_time(self) -> float:
        return float(self._w.clock.now())

    def CancelScope(self, **kw: Any) -> _Bound:  # anyio's name
        return _Bound(anyio.CancelScope(**kw), self._w)


class _Bound:
    def __init__(self, scope: anyio.CancelScope, watch: LimitsWatch) -> None:
        self.scope, self._w = scope, watch

    def __enter__(self) -> anyio.CancelScope:
        s = self.scope.__enter__()
        self._w.bounds[id(s)] = (s, self._w.task_holder.get(_task()), _task())
        if s.deadline <= self._w.clock.now() + EPS:
            # its slot ended while the acquire waited its turn: cut at once, as a deadline
            # already past cancels on entry
            self._w.fire()
        return s

    def __exit__(self, *exc: Any) -> bool:
        self._w.bounds.pop(id(self.scope), None)
        return bool(self.scope.__exit__(*exc))


# --- the store's raw slot documents, and what the run plants there ------------------------


def raw_access(sim_store: Any) -> tuple[Callable[[str], dict[Any, dict[str, Any]]] | None,
                                        Callable[[str, dict[str, Any]], None] | None]:
    """(the slot documents of a key, put a raw document) on the simulation's store; (None, None)
    where there is no synchronous access (the wire store)."""
    b = getattr(sim_store, "b", None)
    if b is not None and b.limits is not None:  # the memory store
        docs = b.limits._docs

        def mem_slots(key: str) -> dict[Any, dict[str, Any]]:
            return {i: dict(d) for i, d in docs.items() if d.get("key") == key}

        return mem_slots, b.limits.put_raw
    raw = getattr(sim_store, "raw", None)
    if raw is not None and hasattr(raw, "__getitem__"):  # mongomock, under the Mongo adapter
        coll = raw[LIMITS_COLLECTION]
        stored = coll._store._documents  # read as they are: a find() scans every TTL index

        def mongo_slots(key: str) -> dict[Any, dict[str, Any]]:
            return {i: dict(d) for i, d in stored.items() if d.get("key") == key}

        def put(doc_id: str, doc: dict[str, Any]) -> None:
            coll.replace_one({"_id": doc_id}, doc, upsert=True)

        return mongo_slots, put
    return None, None


def plant(put: Callable[[str, dict[str, Any]], None] | None, tenants: list[str],
          now: float) -> None:
    """What a stray hand or an old version left in the limits collection: a ghost slot of the
    first tenant's busiest bot, ending a month on (no launch can have written it: the first
    acquire takes it over)."""
    if put is None:
        return
    key = bot_key(tenants[0], GHOST_BOT)
    put(slot_id(key, 0), {"key": key, "holder": "ghost", "until": now + 30 * 86400.0})
