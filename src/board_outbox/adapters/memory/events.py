"""In-memory ``board_events`` with a per-tenant allocator and a change feed."""

from __future__ import annotations

import bisect
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection, Mapping
from typing import Any

import anyio
from anyio.lowlevel import checkpoint

from board_outbox.adapters.memory.probes import FaultPoints, NoFaults
from board_outbox.model.epoch import written_before
from board_outbox.model.errors import ChangeStreamLost
from board_outbox.model.service_documents import seqs_by_tenant
from board_outbox.model.validation import is_seq
from board_outbox.ports import Change, EventRecord

COUNTERS = "board_event_counters"
BATCH = 100  # changes a busy feed hands out between yields to the event loop, like a getMore


class MemoryEventLog:
    """Seq allocation and insert are separate steps, as in Mongo, so holes can be made on purpose.

    Also a ``ChangeFeed``: every insert is appended to a change history, and so is every write
    to the subscriptions (``subscription_changed``, which the backend hooks to its subscription
    store: the Mongo feed's one stream carries both); ``watch`` yields from a resume token (the
    history index), leaving out the ``exclude`` tenants' inserts as the Mongo pipeline's
    ``$match`` does, awaits ``pace`` before it waits for new changes (a getMore), and after
    ``quiet_seconds`` without a change hands out the position scanned so far, as a quiet
    getMore's post-batch token. ``forget_history`` simulates an oplog that rolled over.
    """

    quiet_seconds = 1.0

    def __init__(self, faults: FaultPoints | None = None) -> None:
        self.faults: FaultPoints = faults or NoFaults()
        self._counters: dict[str, int] = {}
        self._docs: dict[str, dict[int, dict[str, Any]]] = {}
        self._seqs: dict[str, list[int]] = {}
        self._history: list[Change] = []
        self._history_floor = 0  # tokens below this are gone
        self._history_at: list[float] = []  # when each change happened (epoch seconds)
        self._changed = anyio.Event()

    async def allocate_seq(self, tenant_id: str) -> int:
        await checkpoint()
        seq = self._counters.get(tenant_id, 0) + 1
        self._counters[tenant_id] = seq
        return seq

    async def insert(self, doc: Mapping[str, Any]) -> None:
        await checkpoint()
        self.insert_now(doc)

    def insert_now(self, doc: Mapping[str, Any], *, allocated: bool = True) -> None:
        """``allocated=False``: plant an event whose seq the counter never handed out."""
        tenant, seq = doc["tenant_id"], doc["seq"]
        docs = self._docs.setdefault(tenant, {})
        if seq in docs:
            raise ValueError(f"duplicate seq {seq} for tenant {tenant}")
        docs[seq] = dict(doc)
        seqs = self._seqs.setdefault(tenant, [])
        if not seqs or seq > seqs[-1]:
            seqs.append(seq)
        else:
            bisect.insort(seqs, seq)
        if allocated:
            self._counters[tenant] = max(self._counters.get(tenant, 0), seq)
        self._append(Change(tenant, seq, len(self._history), docs[seq]))

    def subscription_changed(self) -> None:
        """A subscription was written: the feed says so, as the Mongo feed's stream does."""
        self._append(Change("", 0, len(self._history), subscriptions=True))

    def _append(self, change: Change) -> None:
        self._history.append(change)
        self._history_at.append(time.time())
        self._changed.set()
        self._changed = anyio.Event()

    async def emit(self, tenant_id: str, type: str, card_id: str, at: float = 0.0) -> int:
        seq = await self.allocate_seq(tenant_id)
        await self.insert(
            {"tenant_id": tenant_id, "seq": seq, "type": type, "card_id": card_id, "at": at}
        )
        return seq

    async def read_after(self, tenant_id: str, after_seq: int, limit: int) -> list[EventRecord]:
        await checkpoint()
        seqs = self._seqs.get(tenant_id, [])
        docs = self._docs.get(tenant_id, {})
        i = bisect.bisect_right(seqs, after_seq)
        return [EventRecord(s, docs[s]) for s in seqs[i : i + limit]]

    async def max_inserted_seq(self, tenant_id: str) -> int:
        await checkpoint()
        seqs = self._seqs.get(tenant_id)
        return seqs[-1] if seqs else 0

    async def seq_before(self, tenant_id: str, epoch: float) -> int:
        await checkpoint()
        docs = self._docs.get(tenant_id, {})
        for seq in reversed(self._seqs.get(tenant_id, [])):
            if is_seq(seq) and written_before(docs[seq], epoch):
                return seq
        return 0

    async def allocated_seq(self, tenant_id: str) -> int:
        await checkpoint()
        return self._counters.get(tenant_id, 0)

    async def tenants(self) -> set[str]:
        await checkpoint()
        return set(self._counters)

    async def heads(self) -> dict[str, int]:
        await checkpoint()
        # as the Mongo adapter: each counter parsed alone
        return seqs_by_tenant(COUNTERS, self._counters.items())

    # --- change feed -----------------------------------------------------------------------

    def position(self) -> int | None:
        """The token of the last change so far (None: none yet): a stream resumed from it
        delivers only what comes next."""
        return len(self._history) - 1 if self._history else None

    def forget_history(self) -> None:
        """The oplog rolled over: every token issued so far becomes unresumable."""
        self._history_floor = len(self._history)

    async def history_start(self) -> float | None:
        """When the oldest change still resumable happened; after ``forget_history`` with
        nothing since, now (every token issued is gone); None before any change."""
        await checkpoint()
        if not self._history:
            return None
        if self._history_floor >= len(self._history):
            return time.time()
        return self._history_at[self._history_floor]

    async def watch(
        self, resume_token: Any | None, *, exclude: Collection[str] = (),
        pace: Callable[[], Awaitable[None]] | None = None,
    ) -> AsyncGenerator[Change, None]:
        await checkpoint()  # every (re)open yields, even one that fails at once
        if resume_token is None:
            pos = len(self._history)
        else:
            pos = int(resume_token) + 1
            if pos < self._history_floor:
                raise ChangeStreamLost(f"resume token {resume_token} is older than the history")
        # open: say so at once, as the Mongo feed's first (quiet) batch does
        yield Change("", 0, None)
        skip = frozenset(exclude)
        delivered = 0
        while True:
            self.faults.hit("changefeed.next")
            while pos < len(self._history) and self._history[pos].tenant_id in skip:
                pos += 1  # left out "in the store"
            if pos < len(self._history):
                change = self._history[pos]
                pos += 1
                yield change
                delivered += 1
                if delivered % BATCH == 0:  # a busy feed yields once per getMore-sized batch
                    await checkpoint()
            else:
                if pace is not None:  # the next read waits for new changes: a getMore
                    await pace()
                    if pos < len(self._history):
                        continue
                changed = self._changed
                with anyio.move_on_after(self.quiet_seconds):
                    await changed.wait()
                if not changed.is_set():  # a quiet stretch: the post-batch token
                    yield Change("", 0, pos - 1)
