"""Named fault points for the in-memory twins (and the fault-injection harness).

An adapter calls ``faults.hit("outbox.upsert.row")`` at each step worth breaking; a test arms a
rule: crash the "process" (``Crash``, a BaseException nobody catches) or raise a transient
``StoreUnavailable`` at the N-th hit of a point. With no rules armed, ``hit`` only counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from .errors import StoreUnavailable


class Crash(BaseException):  # noqa: N818 - it is not an error, it is the process dying
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


