"""The rolling series the console charts (lag and throughput over the last hours): what one
replica says about one minute, as stored in ``trigger_series``, and the rules for reading it back.

One document per (minute, replica). Its counts are the replica's *cumulative* counters since it
started (events materialized, rows done, rows dead-lettered) with ``base``, the counters at its
last flush the store acknowledged: the minute's own figures are ``counts - base``, and a flush
that landed although the replica was told it failed is not counted twice (``engine/upkeep/series``
takes the larger of ``base`` and the previous document's counts). Writing absolute values
makes a flush idempotent: the store keeps the larger counts and the smaller base.

Pure: no store access; a stored document is parsed here, one at a time (R1).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import msgspec

from board_outbox.model.bad_documents import BAD_DOCUMENTS, cap
from board_outbox.model.times import time_problem
from board_outbox.model.validation import is_seq

SERIES_COLLECTION = "trigger_series"
MINUTE = 60  # seconds: the series' resolution
MAX_LAG_ENTRIES = 10_000  # a document listing more tenants' lag than this is not ours
MAX_READ = 20_000  # documents one window read returns at most (the newest): 55 replicas x 6 h
COUNTERS = ("materialized", "done", "dead")


class SeriesCounts(msgspec.Struct, frozen=True, kw_only=True):
    """Events materialized, rows done and rows dead-lettered (cumulative, or one minute's)."""

    materialized: int = 0
    done: int = 0
    dead: int = 0

    def minus(self, other: SeriesCounts) -> SeriesCounts:
        return SeriesCounts(materialized=max(0, self.materialized - other.materialized),
                            done=max(0, self.done - other.done),
                            dead=max(0, self.dead - other.dead))

    def plus(self, other: SeriesCounts) -> SeriesCounts:
        return SeriesCounts(materialized=self.materialized + other.materialized,
                            done=self.done + other.done, dead=self.dead + other.dead)

    def as_dict(self) -> dict[str, int]:
        return {"materialized": self.materialized, "done": self.done, "dead": self.dead}


class SeriesPoint(msgspec.Struct, frozen=True, kw_only=True):
    """One replica's word on one minute (a ``trigger_series`` document, parsed)."""

    minute: int  # epoch seconds, a multiple of MINUTE
    replica: str  # the member id (one per process)
    counts: SeriesCounts  # cumulative since the replica started
    base: SeriesCounts  # cumulative at its last acknowledged flush before this one
    lag_total: int = 0  # events behind, over every tenant the replica owns
    behind: int = 0  # tenants behind among them
    lag: tuple[tuple[str, int], ...] = ()  # the most-behind tenants: (tenant, events), most first
    listed: int = 0  # how many tenants the stored lag lists (a read may return fewer: a filter)

    @property
    def capped(self) -> bool:
        """More tenants were behind than the document lists: one it does not list is unknown."""
        return self.behind > self.listed


def minute_of(t: float) -> int:
    """The start of the minute ``t`` falls in (epoch seconds)."""
    return int(t // MINUTE) * MINUTE


def series_id(minute: int, replica: str) -> str:
    return f"{minute}/{replica}"


def top_lag(lag: Mapping[str, int], limit: int) -> tuple[tuple[str, int], ...]:
    """The ``limit`` most-behind tenants of ``lag`` (most first, then by id), those behind only."""
    behind = sorted(((t, n) for t, n in lag.items() if n > 0), key=lambda p: (-p[1], p[0]))
    return tuple(behind[:limit])


def _count(value: object) -> int | None:
    """A count: a true int from 0 to the counter's range (no bool, float or Decimal128)."""
    return value if isinstance(value, int) and is_seq(value) else None


def _counts(name: str, value: object) -> SeriesCounts | str:
    if not isinstance(value, Mapping):
        return f"{name} {cap(repr(value), 60)} is not a document"
    got: dict[str, int] = {}
    for field in COUNTERS:
        n = _count(value.get(field, 0))
        if n is None:
            return f"{name}.{field} {cap(repr(value.get(field)), 60)} is not a count"
        got[field] = n
    return SeriesCounts(**got)


def _lag(value: object) -> tuple[tuple[str, int], ...] | str:
    if not isinstance(value, list):
        return f"lag {cap(repr(value), 60)} is not a list"
    if len(value) > MAX_LAG_ENTRIES:
        return f"lag lists {len(value)} tenants, more than {MAX_LAG_ENTRIES}"
    out: list[tuple[str, int]] = []
    for entry in value:
        t = entry.get("t") if isinstance(entry, Mapping) else None
        n = _count(entry.get("n")) if isinstance(entry, Mapping) else None
        if not isinstance(t, str) or n is None:
            return f"lag entry {cap(repr(entry), 80)} is not {{t: tenant, n: count}}"
        out.append((t, n))
    return tuple(out)


def series_problem(doc: Mapping[str, Any]) -> SeriesPoint | str:
    """The document as a ``SeriesPoint``, or what is wrong with it."""
    raw, replica = doc.get("minute"), doc.get("replica")
    minute = _count(raw)
    if minute is None or minute % MINUTE:
        return f"minute {cap(repr(raw), 60)} is not the start of a minute (epoch seconds)"
    if (problem := time_problem("minute", minute)) is not None:  # R7: 1e12 is no minute
        return problem
    if not isinstance(replica, str) or not replica:
        return f"replica {cap(repr(replica), 60)} is not a non-empty string"
    counts = _counts("counts", doc.get("counts"))
    if isinstance(counts, str):
        return counts
    base = _counts("base", doc.get("base", {}))
    if isinstance(base, str):
        return base
    lag = _lag(doc.get("lag", []))
    if isinstance(lag, str):
        return lag
    figures = {"lag_total": doc.get("lag_total", 0), "behind": doc.get("behind", 0),
               "listed": doc.get("listed", len(lag))}
    checked: dict[str, int] = {}
    for name, value in figures.items():
        n = _count(value)
        if n is None:
            return f"{name} {cap(repr(value), 60)} is not a count"
        checked[name] = n
    return SeriesPoint(minute=minute, replica=replica, counts=counts, base=base,
                       lag_total=checked["lag_total"], behind=checked["behind"], lag=lag,
                       listed=checked["listed"])


def only_lag_of(doc: Mapping[str, Any], tenants: Collection[str] | None) -> Mapping[str, Any]:
    """``doc`` with its lag entries of ``tenants`` only (None: as stored; a lag that is not a
    list is left for the parse to refuse). A read keeps what it was asked for before parsing:
    the other tenants' entries cost neither the parse nor a refusal here."""
    lag = doc.get("lag")
    if tenants is None or not isinstance(lag, list):
        return doc
    wanted = tenants if isinstance(tenants, (set, frozenset)) else set(tenants)
    return {**doc, "lag": [e for e in lag if isinstance(e, Mapping)
                           and isinstance(e.get("t"), str) and e["t"] in wanted]}


def series_points(docs: Iterable[Mapping[str, Any]],
                  tenants: Collection[str] | None = None) -> list[SeriesPoint]:
    """Stored series documents parsed one at a time, each point's lag listing ``tenants`` only
    (None: every tenant): one that does not parse is left out and reported once
    (``BAD_DOCUMENTS``); the others stand."""
    out: list[SeriesPoint] = []
    for stored in docs:
        doc = only_lag_of(stored, tenants)
        got = series_problem(doc)
        key = doc.get("_id", "?")
        if isinstance(got, str):
            BAD_DOCUMENTS.report(SERIES_COLLECTION, key, got, level=logging.WARNING)
        else:
            out.append(got)
    return out
