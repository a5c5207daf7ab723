"""Named fault points for tests and the fault-injection harness.

``FaultProxy`` wraps any port (memory twin or Mongo adapter) so that every call passes the points
``<port>.<method>`` and ``<port>.<method>.after`` (a call that applies a row transition names it:
``outbox.apply_claimed[done]``, ``outbox.apply_claimed_many[done]``, ``outbox.apply_failed[replay]``,
see ``point_of``); a few twins also hit points of their own
(``changefeed.next``, ``launcher.launch[.after]``). A test arms a rule: crash the "process"
(``Crash``, a BaseException nobody catches) or raise a transient ``StoreUnavailable`` at the N-th
hit of a point. With no rules armed, ``hit`` only counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from board_outbox.model.errors import StoreUnavailable
from board_outbox.model.transitions import Mark, Transition


class Crash(BaseException):
    """Simulated process death at a fault point. BaseException: no ``except Exception`` eats it."""

    def __init__(self, point: str) -> None:
        super().__init__(f"simulated crash at {point}")
        self.point = point


@dataclass
class _Rule:
    point: str
    nth: int  # fire at this hit number (1-based) ...
    times: int  # ... and for this many consecutive hits
    make: Callable[[str], BaseException]


class FaultInjector:
    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.fired: Counter[str] = Counter()
        self.partial: dict[str, int] = {}
        self._rules: list[_Rule] = []

    def crash_at(self, point: str, nth: int = 1) -> None:
        self._rules.append(_Rule(point, self.hits[point] + nth, 1, Crash))

    def fail_at(self, point: str, nth: int = 1, times: int = 1) -> None:
        self._rules.append(
            _Rule(point, self.hits[point] + nth, times, lambda p: StoreUnavailable(f"injected at {p}"))
        )

    def clear(self) -> None:
        self._rules.clear()

    def hit(self, point: str) -> None:
        self.hits[point] += 1
        n = self.hits[point]
        for rule in self._rules:
            if rule.point == point and rule.nth <= n < rule.nth + rule.times:
                self.fired[point] += 1
                raise rule.make(point)




def point_of(prefix: str, name: str, args: tuple[object, ...]) -> str:
    """The fault point of a port call: ``<prefix>.<name>``, and for a call that applies a row
    transition (``apply_claimed(ref, claim_id, t)``...) the transition's name in brackets."""
    t = next((a for a in args if isinstance(a, Transition)), None)
    if t is None and args and isinstance(args[0], list) and args[0] and \
            all(isinstance(m, Mark) for m in args[0]):  # apply_marks: the marks' transition
        names = sorted({m.t.name for m in args[0]})
        return f"{prefix}.{name}[{','.join(names)}]"
    return f"{prefix}.{name}" if t is None else f"{prefix}.{name}[{t.name}]"


class FaultProxy:
    """Wrap any port so that each async method call passes fault points
    ``<prefix>.<method>`` (before) and ``<prefix>.<method>.after`` (after it returned).

    ``upsert_rows`` also honours ``faults.partial[<prefix>.upsert_rows] = k``: write only the
    first k rows, then crash -- a crash in the middle of the bulk write, on any backend.
    """

    def __init__(self, target: object, prefix: str, faults: FaultInjector) -> None:
        self._target = target
        self._prefix = prefix
        self._faults = faults

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._target, name)
        if not callable(attr) or name.startswith("_") or name == "watch":
            return attr
        prefix = self._prefix
        faults = self._faults

        async def call(*args: object, **kwargs: object) -> object:
            point = point_of(prefix, name, args)
            faults.hit(point)
            keep = faults.partial.pop(point, None)
            if keep is not None and args:
                rows = list(args[0])  # type: ignore[call-overload]
                await attr(rows[:keep], *args[1:], **kwargs)
                faults.fired[point] += 1
                raise Crash(f"{point}[{keep}/{len(rows)}]")
            result = await attr(*args, **kwargs)
            faults.hit(point + ".after")
            return result

        return call
