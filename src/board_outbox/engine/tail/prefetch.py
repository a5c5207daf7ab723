"""Events the change stream delivered, kept so the tail need not read them again.

The stream hands out each insert's document (the fields the event log's read returns). The
tail's next batch after cursor ``c`` is served from here when the tenant's buffer is *trusted*
and holds ``c + 1`` and the seqs after it without a hole: exactly the events a read would
return first, as the stream saw them inserted (events are never rewritten). Anything else is a
normal read from the store, so the buffer only saves round trips; it never decides what is
materialized.

**Trust.** A served batch shorter than the batch size ends the tenant's drain (nothing more
behind), so the buffer must hold every event inserted after the ones it serves. A tenant's
buffer earns that once a complete read from the store (it passed everything it read, and read
less than its limit) *started after the buffer existed*: every event committed before the read
is in the read, every later one was delivered into the buffer. Anything that can lose a delivery
drops the buffer and its trust: the stream reopening (``clear``), a tenant changing owner, a
buffer over its bound. The next read from the store earns it again.

- A document is parsed by the same decoder as a read's (``decode_event``): a bad one costs only
  itself, as on the read path.
- Served events leave the buffer; a batch that then aborts leaves a hole at the front, so the
  next batch reads from the store.
- Bounded per tenant and in all; the least recently used tenant goes first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from board_outbox.model.records import EventRecord
from board_outbox.model.validation import is_seq

PER_TENANT = 1000  # events kept per tenant (a tail batch's default size)
TOTAL = 10_000  # events kept in all
TENANTS = 8192  # tenants with a buffer (most are empty and trusted at a trickle)


class StreamEvents:
    def __init__(self, *, per_tenant: int = PER_TENANT, total: int = TOTAL,
                 tenants: int = TENANTS) -> None:
        self.per_tenant = per_tenant
        self.total = total
        self.tenants = tenants
        # tenant -> seq -> document, tenants in the order they were last used
        self._docs: dict[str, dict[int, Mapping[str, Any]]] = {}
        self._gen: dict[str, int] = {}  # the buffer's incarnation (a dropped one never returns)
        self._next = 0
        self._trusted: set[str] = set()
        self._count = 0
        self.served = 0  # events handed to the tail from here (reads saved)
        self.dropped = 0  # buffers dropped over a bound

    def offer(self, tenant_id: str, seq: Any, doc: Mapping[str, Any]) -> None:
        """One insert the stream delivered for a tenant this replica owns."""
        if not is_seq(seq):
            return  # a poison seq is the read path's to report (R2)
        docs = self._entry(tenant_id)
        if len(docs) >= self.per_tenant:
            self._drop(tenant_id)  # deliveries lost: untrusted until the next full read
            docs = self._entry(tenant_id)
        while self._count >= self.total and len(self._docs) > 1:
            self._drop(next(iter(self._docs)))
        if seq not in docs:
            self._count += 1
        docs[seq] = doc

    def take(self, tenant_id: str, after: int, limit: int) -> list[EventRecord] | None:
        """The events ``after + 1 ..`` without a hole, at most ``limit``, taken out of a trusted
        buffer; None (read from the store) when the buffer is not trusted or does not hold
        ``after + 1``. Seqs up to ``after`` are dropped on the way."""
        docs = self._docs.get(tenant_id)
        if not docs or tenant_id not in self._trusted:
            return None
        for seq in [s for s in docs if s <= after]:
            del docs[seq]
            self._count -= 1
        out: list[EventRecord] = []
        seq = after + 1
        while seq in docs and len(out) < limit:
            out.append(EventRecord(seq, docs.pop(seq)))
            seq += 1
        self._count -= len(out)
        if not out:
            return None
        self.served += len(out)
        return out

    def begin_read(self, tenant_id: str) -> int:
        """A read from the store is about to start: the buffer it may earn trust for."""
        self._entry(tenant_id)
        return self._gen[tenant_id]

    def end_read(self, tenant_id: str, gen: int) -> None:
        """That read was complete (it passed all it read, and read less than its limit): the
        buffer, if it is still the one the read started with, now holds every later event."""
        if self._gen.get(tenant_id) == gen:
            self._trusted.add(tenant_id)

    def trusted(self, tenant_id: str) -> bool:
        return tenant_id in self._trusted

    def forget(self, tenant_id: str) -> None:
        """Drop a tenant's buffer and its trust."""
        docs = self._docs.pop(tenant_id, None)
        if docs is not None:
            self._count -= len(docs)
        self._gen.pop(tenant_id, None)
        self._trusted.discard(tenant_id)

    def clear(self) -> None:
        """The stream reopens: deliveries may have been lost, nothing is trusted."""
        self._docs.clear()
        self._gen.clear()
        self._trusted.clear()
        self._count = 0

    def _entry(self, tenant_id: str) -> dict[int, Mapping[str, Any]]:
        docs = self._docs.pop(tenant_id, None)
        if docs is None:
            while len(self._docs) >= self.tenants:
                self._drop(next(iter(self._docs)))
            docs = {}
            self._next += 1
            self._gen[tenant_id] = self._next
        self._docs[tenant_id] = docs  # (re)inserted last: the most recently used
        return docs

    def _drop(self, tenant_id: str) -> None:
        self.forget(tenant_id)
        self.dropped += 1

    def __len__(self) -> int:
        return self._count
