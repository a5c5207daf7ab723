"""The instruments and the board of ``costs.py``: telemetry switched on but exporting nowhere,
the server's own operation counters, this process's CPU around an awaited call, and the seeded
board (events, cards, subscriptions) every measured run starts from. Separate from the
workloads they measure, so a workload reads as the commands it sends."""

from __future__ import annotations

import gc
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from pymongo import AsyncMongoClient

from board_outbox.model.board import Card
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import Stores

CARDS = 200


# --- telemetry on, exporting nowhere -------------------------------------------------------------


class NullSpanExporter(SpanExporter):
    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


class NullMetricExporter(MetricExporter):
    def __init__(self) -> None:
        super().__init__(preferred_temporality={}, preferred_aggregation={})

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


_ = AggregationTemporality  # the exporter keeps the SDK's default temporality


def telemetry_on() -> tuple[TracerProvider, MeterProvider, NullSpanExporter]:
    resource = Resource.create({"service.name": "board-outbox"})
    spans = NullSpanExporter()
    tp = TracerProvider(resource=resource)
    tp.add_span_processor(BatchSpanProcessor(spans))
    mp = MeterProvider(resource=resource, metric_readers=[
        PeriodicExportingMetricReader(NullMetricExporter(), export_interval_millis=1000)])
    return tp, mp, spans


# --- measuring -----------------------------------------------------------------------------------


OPS = ("query", "getmore", "insert", "update", "delete")


async def server_ops(client: AsyncMongoClient[dict[str, Any]]) -> Counter[str]:
    """The server's operation counters by kind, and ``requests``: every request it received
    (one per command). Driver heartbeats (``hello``, every 10 s per client) land in
    ``requests`` too."""
    status = await client.admin.command("serverStatus")
    out = Counter({k: int(status.get("opcounters", {}).get(k, 0)) for k in OPS})
    out["requests"] = int(status.get("network", {}).get("numRequests", 0))
    return out


async def server_ops_since(client: AsyncMongoClient[dict[str, Any]], before: Counter[str],
                           ) -> Counter[str]:
    ops = await server_ops(client)
    ops.subtract(before)
    ops["requests"] -= 1  # this read itself
    return ops


def settle() -> None:
    """Setup objects out of the cyclic GC, as ``Service.run`` does at start."""
    gc.collect()
    gc.unfreeze()
    gc.freeze()


async def cpu_of(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    """(CPU seconds of this process while ``fn`` ran, its result)"""
    settle()
    c0 = time.process_time()
    out = await fn()
    return time.process_time() - c0, out


# --- boards --------------------------------------------------------------------------------------


def event_docs(tenants: list[str], events: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    seqs = dict.fromkeys(tenants, 0)
    now = time.time()
    docs = []
    for n in range(events):
        t = tenants[n % len(tenants)]
        seqs[t] += 1
        docs.append({"tenant_id": t, "seq": seqs[t], "type": "card.updated",
                     "card_id": f"c{rng.randrange(CARDS)}", "at": now})
    return docs


async def load_board(db: Any, stores: Stores, tenants: list[str], events: list[dict[str, Any]],
                     subs: bool) -> None:
    for t in tenants:
        if subs:
            await stores.subs.put(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="bot",
                                               rule=MatchRule()))
        for c in range(CARDS):
            await stores.cards.put(Card(tenant_id=t, card_id=f"c{c}", title=f"card {c}",
                                        column="todo", labels=("x",)))
    await db["board_events"].insert_many([dict(d) for d in events], ordered=False)
    heads: dict[str, int] = {}
    for d in events:
        heads[d["tenant_id"]] = max(heads.get(d["tenant_id"], 0), d["seq"])
    for t, seq in heads.items():
        await db["board_event_counters"].update_one({"_id": t}, {"$max": {"seq": seq}}, upsert=True)
