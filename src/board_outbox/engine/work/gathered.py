"""Read-model writes gathered across tenants (P2): the projection rows of one projection in a
claimed batch are applied tenant by tenant (``apply_many(tenant_id, events)``, the projection's
own call), and their writes meet in one bulk write.

``GatheredReadModels`` is the ``ReadModelStore`` the projections are built with: outside
``gathered`` it passes every call through. ``gathered(jobs)`` runs jobs (one per tenant) side
by side; a write a job makes waits until every job has either finished or is waiting on a
write of its own, and then all the waiting writes go out as one ``write_groups`` (one round;
a job that writes again waits for the next round). A job blocked on anything else (a read)
holds the round back until it writes or finishes, so a round never leaves a job's write
behind, and no timer is involved. Each write answers its own job: per op, what ``write_many``
says. The newer-wins fence is per document, in the store (``UpsertIfNewer``, ``PushRecent``),
and a tenant's events reach its projection in their order, as before.

If the bulk write is refused (a document, a malformed generation pointer: ``StoreError``),
each group is written on its own, so only the job whose write is refused fails; a store outage
(``StoreUnavailable``) fails every waiting job (their rows run again on their own).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

import anyio

from board_outbox.model.errors import StoreError
from board_outbox.ports import ReadModelOp, ReadModelStore, ReadModelWrites, UpsertIfNewer

__all__ = ["GatheredReadModels", "gathered"]

R = TypeVar("R")


class _Write:
    """One job's write, waiting for its round."""

    def __init__(self, base: ReadModelStore, group: ReadModelWrites) -> None:
        self.base, self.group = base, group
        self.done = anyio.Event()
        self.result: list[bool] = []
        self.error: BaseException | None = None


class _Round:
    """The jobs of one ``gathered`` call and the writes waiting for the next bulk write."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.finished = 0
        self.waiting: list[_Write] = []

    def ready(self) -> bool:
        """Every job is waiting on a write or has finished: nothing more will come this round."""
        return bool(self.waiting) and self.finished + len(self.waiting) >= self.jobs

    async def write(self, w: _Write) -> list[bool]:
        self.waiting.append(w)
        if self.ready():
            await self.flush()
        else:
            await w.done.wait()
        if w.error is not None:
            raise w.error
        return w.result

    async def finish(self) -> None:
        self.finished += 1
        if self.ready():
            await self.flush()

    async def flush(self) -> None:
        batch, self.waiting = self.waiting, []
        by_base: dict[int, list[_Write]] = {}
        for w in batch:
            by_base.setdefault(id(w.base), []).append(w)
        try:
            for writes in by_base.values():
                await _write(writes)
        finally:
            for w in batch:
                w.done.set()


async def _write(writes: list[_Write]) -> None:
    """One bulk write for these writes (one base store), each answered with its result or the
    error; refused (``StoreError``): each on its own, so only a refused one fails."""
    try:
        results = await writes[0].base.write_groups([w.group for w in writes])
    except StoreError as exc:
        if len(writes) == 1:
            writes[0].error = exc
            return
        for w in writes:
            try:
                w.result = (await w.base.write_groups([w.group]))[0]
            except Exception as one:
                w.error = one
        return
    except Exception as exc:  # StoreUnavailable among others: every waiting write fails
        for w in writes:
            w.error = exc
        return
    for w, result in zip(writes, results, strict=True):
        w.result = result


_ROUND: ContextVar[_Round | None] = ContextVar("board_outbox_gathered_round", default=None)


async def gathered(jobs: Sequence[Callable[[], Awaitable[R]]]) -> list[R | Exception]:
    """Run ``jobs`` side by side, their writes through ``GatheredReadModels`` gathered into one
    bulk write per round; each job's result, or the exception it raised, in order."""
    out: list[R | Exception] = [Exception("not run")] * len(jobs)
    rnd = _Round(len(jobs))

    async def run(i: int) -> None:
        try:
            out[i] = await jobs[i]()
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            out[i] = exc
        finally:
            with anyio.CancelScope(shield=True):
                await rnd.finish()

    token = _ROUND.set(rnd)  # the jobs' tasks start with a copy of this context
    try:
        async with anyio.create_task_group() as tg:
            for i in range(len(jobs)):
                tg.start_soon(run, i)
    finally:
        _ROUND.reset(token)
    return out


class GatheredReadModels:
    """A ``ReadModelStore`` whose writes made inside ``gathered`` meet in one bulk write."""

    def __init__(self, base: ReadModelStore) -> None:
        self.base = base

    async def write_many(self, model: str, tenant_id: str, ops: Sequence[ReadModelOp]) -> list[bool]:
        rnd = _ROUND.get()
        if rnd is None:
            return await self.base.write_many(model, tenant_id, ops)
        return await rnd.write(_Write(self.base, ReadModelWrites(model, tenant_id, ops)))

    async def upsert_if_newer(
        self, model: str, tenant_id: str, key: str, seq: int, doc: Mapping[str, Any]
    ) -> bool:
        if _ROUND.get() is None:
            return await self.base.upsert_if_newer(model, tenant_id, key, seq, doc)
        return (await self.write_many(model, tenant_id,
                                      [UpsertIfNewer(key=key, seq=seq, doc=doc)]))[0]

    async def write_groups(self, groups: Sequence[ReadModelWrites]) -> list[list[bool]]:
        return await self.base.write_groups(groups)

    async def get(self, model: str, tenant_id: str, key: str) -> dict[str, Any] | None:
        return await self.base.get(model, tenant_id, key)

    async def list(self, model: str, tenant_id: str) -> list[dict[str, Any]]:
        return await self.base.list(model, tenant_id)

    async def reset(self, model: str, tenant_id: str) -> int:
        return await self.base.reset(model, tenant_id)
