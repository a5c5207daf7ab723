"""Contract checks for projections, to call from a projection's own tests: the built-ins' and
yours. Projection rows run at least once and in any order (several replicas, a crash before the
done mark, a rebuild), so a projection must converge; these checks say whether yours does.

Two ways to use them::

    from board_outbox.testing import ProjectionContract, check_projection

    async def test_title_log_keeps_the_projection_contract() -> None:
        await check_projection(TitleLog)            # raises ProjectionContractError if not

    class TestTitleLogContract(ProjectionContract):  # pytest: one test per property
        projection = TitleLog

What is checked (``PROPERTIES``), each against a reference read model built by applying every
event once, in seq order, on a fresh tenant:

- ``idempotent``: each event applied twice leaves the reference;
- ``order``: the events in shuffled orders, some repeated, spread over two instances of the
  projection (two replicas), leave the reference;
- ``reset``: ``reset`` empties the tenant's read model and no other tenant's, and applying the
  events again rebuilds the reference;
- ``apply_many`` (a ``BatchProjection`` only): shuffled batches, some events repeated, leave the
  reference, with one outcome label per event.

A projection is built as the service builds it, ``factory(store)`` (its class is a factory); the
read models compared are ``models`` (default: the projection's ``name``), read through the store
(``list``), without ``tenant_id``. The store defaults to the in-memory twin; pass another (a test
database's) to run the checks on it.
"""

from __future__ import annotations

import copy
import random
import unittest
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import anyio

from board_outbox.adapters.memory import MemoryReadModelStore
from board_outbox.engine.handlers.contract import BatchProjection, Projection
from board_outbox.model.board import EventSnapshot
from board_outbox.ports import ReadModelStore

__all__ = [
    "PROPERTIES",
    "ProjectionContract",
    "ProjectionContractError",
    "ProjectionFactory",
    "check_projection",
    "contract_events",
]

ProjectionFactory = Callable[[ReadModelStore], Projection]
PROPERTIES = ("idempotent", "order", "reset", "apply_many")
_SHOW = 600  # characters of a differing document shown in a failure


class ProjectionContractError(AssertionError):
    """A projection broke its contract: the message names the projection, the property and the
    first difference from the reference read model."""


def contract_events(n: int = 24, *, cards: int = 4, seed: int = 0) -> list[EventSnapshot]:
    """A varied stream of ``n`` events (seqs 1..n) over ``cards`` cards: created, moved,
    labelled, retitled, by several actors, each card's last event a deletion when ``n`` allows."""
    rng = random.Random(seed)
    columns = ("inbox", "doing", "review", "done")
    out: list[EventSnapshot] = []
    state: dict[str, dict[str, Any]] = {}
    for seq in range(1, n + 1):
        card = f"card-{rng.randrange(cards)}"
        cur = state.get(card)
        if cur is None:
            cur = state[card] = {"title": f"{card} title", "column": "inbox", "labels": ()}
            etype = "card.created"
        else:
            etype = rng.choice(("card.moved", "card.labeled", "card.updated"))
            if etype == "card.moved":
                cur["column"] = rng.choice(columns)
            elif etype == "card.labeled":
                cur["labels"] = tuple(sorted({*cur["labels"], rng.choice(("bug", "ship", "ux"))}))
            else:
                cur["title"] = f"{cur['title']}!"
        out.append(EventSnapshot(seq=seq, type=etype, card_id=card, at=1000.0 + seq,
                                 actor=f"user-{rng.randrange(3)}", title=cur["title"],
                                 column=cur["column"], labels=cur["labels"]))
    if n >= 2 * cards:  # the newest event of the first card deletes it
        last = max(i for i, e in enumerate(out) if e.card_id == out[0].card_id)
        e = out[last]
        out[last] = EventSnapshot(seq=e.seq, type="card.deleted", card_id=e.card_id, at=e.at,
                                  actor=e.actor, title=e.title, column=e.column, labels=e.labels,
                                  deleted=True)
    return out


@dataclass
class _Run:
    factory: ProjectionFactory
    store: ReadModelStore
    events: list[EventSnapshot]
    models: tuple[str, ...]
    rng: random.Random
    name: str
    run_id: str

    def tenant(self, what: str) -> str:
        return f"contract-{self.run_id}-{what}"

    def new(self) -> Projection:
        return self.factory(self.store)

    async def state(self, tenant_id: str) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for model in self.models:
            docs = await self.store.list(model, tenant_id)
            out[model] = sorted(({k: copy.deepcopy(v) for k, v in d.items()
                                  if k not in ("tenant_id", "_id")} for d in docs),
                                key=lambda d: str(d.get("key")))
        return out

    async def apply_in_order(self, tenant_id: str) -> None:
        proj = self.new()
        for ev in self.events:
            await proj.apply(tenant_id, ev)

    def shuffled_with_repeats(self) -> list[EventSnapshot]:
        extra = self.rng.sample(self.events, max(1, len(self.events) // 3))
        out = [*self.events, *extra]
        self.rng.shuffle(out)
        return out

    async def expect(self, prop: str, tenant_id: str, reference: dict[str, Any], how: str) -> None:
        got = await self.state(tenant_id)
        if got != reference:
            raise ProjectionContractError(
                f"projection {self.name!r} breaks {prop!r}: {how} gives a read model that differs "
                f"from applying every event once, in seq order: {_difference(reference, got)}")


def _difference(want: dict[str, list[dict[str, Any]]], got: dict[str, list[dict[str, Any]]]) -> str:
    for model in want:
        w = {str(d.get("key")): d for d in want[model]}
        g = {str(d.get("key")): d for d in got.get(model, [])}
        if set(w) != set(g):
            return (f"model {model!r} holds keys {sorted(g)[:10]}, the reference {sorted(w)[:10]}")
        for key in sorted(w):
            if w[key] != g[key]:
                return (f"model {model!r} key {key!r} is {repr(g[key])[:_SHOW]}, "
                        f"the reference {repr(w[key])[:_SHOW]}")
    return "the read models differ"


async def _idempotent(run: _Run, reference: dict[str, Any]) -> None:
    t = run.tenant("twice")
    proj = run.new()
    for ev in run.events:
        await proj.apply(t, ev)
        await proj.apply(t, ev)
    await run.expect("idempotent", t, reference, "applying each event twice")


async def _order(run: _Run, reference: dict[str, Any]) -> None:
    for i in range(3):
        t = run.tenant(f"order{i}")
        replicas = (run.new(), run.new())
        for ev in run.shuffled_with_repeats():
            await run.rng.choice(replicas).apply(t, ev)
        await run.expect("order", t, reference, "applying the events shuffled, some repeated, "
                         "by two instances")


async def _reset(run: _Run, reference: dict[str, Any]) -> None:
    mine, other = run.tenant("reset"), run.tenant("other")
    await run.apply_in_order(mine)
    await run.apply_in_order(other)
    await run.new().reset(mine)
    empty: dict[str, list[dict[str, Any]]] = {m: [] for m in run.models}
    left = await run.state(mine)
    if left != empty:
        raise ProjectionContractError(
            f"projection {run.name!r} breaks 'reset': the tenant's read model still holds "
            f"{_difference(empty, left)}")
    await run.expect("reset", other, reference, "resetting another tenant")
    await run.apply_in_order(mine)
    await run.expect("reset", mine, reference, "applying the events again after a reset")


async def _apply_many(run: _Run, reference: dict[str, Any]) -> None:
    proj = run.new()
    if not isinstance(proj, BatchProjection):
        return
    t = run.tenant("many")
    events = run.shuffled_with_repeats()
    cut = sorted(run.rng.sample(range(1, len(events)), min(3, len(events) - 1)))
    for lo, hi in zip([0, *cut], [*cut, len(events)], strict=True):
        batch = events[lo:hi]
        labels = list(await proj.apply_many(t, batch))
        if len(labels) != len(batch) or not all(isinstance(x, str) for x in labels):
            raise ProjectionContractError(
                f"projection {run.name!r} breaks 'apply_many': a batch of {len(batch)} events "
                f"gave {len(labels)} outcome labels ({labels[:5]!r}...): one str per event, in order")
    await run.expect("apply_many", t, reference, "apply_many over shuffled batches, some events "
                     "repeated")
    t = run.tenant("many-in-order")
    await proj.apply_many(t, run.events)
    await run.expect("apply_many", t, reference, "apply_many of every event at once")


_CHECKS: dict[str, Callable[[_Run, dict[str, Any]], Awaitable[None]]] = {
    "idempotent": _idempotent, "order": _order, "reset": _reset, "apply_many": _apply_many,
}


async def check_projection(
    factory: ProjectionFactory,
    *,
    store: ReadModelStore | None = None,
    events: Sequence[EventSnapshot] | None = None,
    models: Iterable[str] | None = None,
    only: Iterable[str] | None = None,
    seed: int = 0,
) -> None:
    """Check ``factory``'s projection against the contract (every property in ``PROPERTIES``,
    or ``only`` those); raise ``ProjectionContractError`` at the first one broken. The checks
    write tenants named ``contract-<run>-...`` into ``store`` (default: a fresh in-memory one)."""
    wanted = tuple(only) if only is not None else PROPERTIES
    unknown = [p for p in wanted if p not in _CHECKS]
    if unknown:
        raise ValueError(f"unknown contract properties {unknown} (known: {', '.join(PROPERTIES)})")
    store = store if store is not None else MemoryReadModelStore()
    probe = factory(store)
    evs = list(events) if events is not None else contract_events(seed=seed)
    if len(evs) < 2:
        raise ValueError("the contract needs at least two events")
    run = _Run(factory=factory, store=store, events=sorted(evs, key=lambda e: e.seq),
               models=tuple(models) if models is not None else (probe.name,),
               rng=random.Random(seed), name=probe.name, run_id=uuid.uuid4().hex[:8])
    ref = run.tenant("reference")
    await run.apply_in_order(ref)
    reference = await run.state(ref)
    if not any(reference.values()):
        raise ProjectionContractError(
            f"projection {run.name!r}: applying the events wrote nothing to {list(run.models)} "
            "(pass models= naming the read models it writes)")
    for prop in wanted:
        await _CHECKS[prop](run, reference)


class ProjectionContract:
    """The contract as a test class: subclass it (its name starting with ``Test``) and set
    ``projection`` to the projection's class (or any ``factory(store)``); pytest then runs one
    test per property. Override ``make_store`` to check on another store, ``events`` for your
    own event stream, ``models`` when the projection writes read models not named ``name``.
    ``apply_many`` is skipped for a projection without it."""

    projection: ClassVar[ProjectionFactory]
    models: ClassVar[tuple[str, ...] | None] = None

    def make_store(self) -> ReadModelStore:
        return MemoryReadModelStore()

    def events(self) -> list[EventSnapshot]:
        return contract_events()

    def _check(self, prop: str) -> None:
        factory = type(self).projection
        anyio.run(partial(check_projection, factory, store=self.make_store(), events=self.events(),
                          models=self.models, only=[prop]))

    def test_idempotent(self) -> None:
        self._check("idempotent")

    def test_order_independent(self) -> None:
        self._check("order")

    def test_reset(self) -> None:
        self._check("reset")

    def test_apply_many_equals_apply_one_by_one(self) -> None:
        if not isinstance(type(self).projection(self.make_store()), BatchProjection):
            raise unittest.SkipTest("the projection has no apply_many")
        self._check("apply_many")
