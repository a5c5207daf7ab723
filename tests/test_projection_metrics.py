"""Per-projection visibility (P2): lag (materialized seq - applied seq) and rebuild progress, as
OpenTelemetry gauges."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.model.board import Card
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.surface.admin import rebuild_projection

pytestmark = pytest.mark.anyio
T = "t1"


def gauges(reader: InMemoryMetricReader) -> dict[tuple[str, str, str], Any]:
    out: dict[tuple[str, str, str], Any] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    attrs = dict(p.attributes or {})
                    if "projection" in attrs:
                        out[(m.name, str(attrs["tenant_id"]), str(attrs["projection"]))] = p.value
    return out


async def test_projection_lag_and_rebuild_progress_gauges() -> None:
    reader = InMemoryMetricReader()
    metrics = Metrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    backend = MemoryBackend()
    await backend.board.put(Card(tenant_id=T, card_id="c1"))
    for _ in range(5):
        await backend.events.emit(T, "card.updated", "c1")
    cfg = load_config(env={}, tail={"seed": "earliest"}, projections=["board-reflect", "card-activity"])
    service = Service(backend.stores(), cfg)
    service.worker.metrics = service.metrics = metrics
    for r in await service.tail.drain_all([T]):
        metrics.projection_materialized(r.tenant_id, service.tail.projections, r.cursor_after)
    assert metrics.projection_lag() == {(T, "board-reflect"): 5, (T, "card-activity"): 5}
    assert gauges(reader)[("board_outbox.projection.lag", T, "card-activity")] == 5
    assert (await service.worker.tick_any()).done == 10
    g = gauges(reader)
    assert g[("board_outbox.projection.lag", T, "board-reflect")] == 0
    assert g[("board_outbox.projection.applied_seq", T, "card-activity")] == 5

    seen: list[tuple[int, int]] = []
    res = await rebuild_projection(
        name="card-activity", tenant_id=T, registry=service.registry, events=backend.events,
        cards=backend.board, clock=service.clock, young_gap_seconds=30.0, batch_size=2,
        progress=lambda done, head: seen.append((done, head)), metrics=metrics)
    assert res.applied == 5 and seen == [(2, 5), (4, 5), (5, 5)]
    g = gauges(reader)
    assert g[("board_outbox.projection.rebuild.progress", T, "card-activity")] == 1.0
    assert g[("board_outbox.projection.rebuild.seq", T, "card-activity")] == 5
