"""Metrics through the OpenTelemetry metrics API (C3).

Instruments (names are stable; see tracing/README.md):
- ``board_outbox.tail.lag`` (gauge, per tenant): allocated seq minus cursor;
- ``board_outbox.rows`` (gauge, per state): rows in trigger_effects;
- ``board_outbox.materialize_to_done`` (histogram, s): row materialized -> done;
- ``board_outbox.attempts`` (histogram): attempts a row needed to finish;
- ``board_outbox.dead_letters`` (counter): rows parked as failed;
- ``board_outbox.wakes`` (counter, source=stream|poll): what woke the tail.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from ..domain import EffectRow
from .prometheus import PrometheusMirror


class Metrics:
    def __init__(self, meter: metrics.Meter | None = None) -> None:
        m = meter or metrics.get_meter("board_outbox")
        self.lag: dict[str, int] = {}
        self.rows: dict[str, int] = {}
        self.prom = PrometheusMirror()  # the same instruments, for /metrics (O1)
        m.create_observable_gauge("board_outbox.tail.lag", [self._observe_lag], unit="{event}",
                                  description="allocated seq minus cursor, per tenant")
        m.create_observable_gauge("board_outbox.rows", [self._observe_rows], unit="{row}",
                                  description="effect rows by state")
        self.latency = m.create_histogram("board_outbox.materialize_to_done", unit="s",
                                          description="row materialized -> done")
        self.attempts = m.create_histogram("board_outbox.attempts", unit="{attempt}",
                                           description="attempts a row needed to finish")
        self.dead = m.create_counter("board_outbox.dead_letters", unit="{row}",
                                     description="rows parked as failed")
        self.wakes = m.create_counter("board_outbox.wakes", unit="{wake}",
                                      description="tail wakes by source")

    def _observe_lag(self, _opts: CallbackOptions) -> Iterable[Observation]:
        return [Observation(v, {"tenant_id": t}) for t, v in sorted(self.lag.items())]

    def _observe_rows(self, _opts: CallbackOptions) -> Iterable[Observation]:
        return [Observation(v, {"state": s}) for s, v in sorted(self.rows.items())]

    def row_done(self, row: EffectRow, now: float) -> None:
        attrs = {"kind": row.kind}
        if row.materialized_at:
            self.latency.record(max(0.0, now - row.materialized_at), attrs)
            self.prom.latency.labels(row.kind).observe(max(0.0, now - row.materialized_at))
        self.attempts.record(row.attempts + 1, attrs)
        self.prom.attempts.labels(row.kind).observe(row.attempts + 1)

    def row_failed(self, kind: str) -> None:
        self.dead.add(1, {"kind": kind})
        self.prom.dead.labels(kind).inc()

    def wake(self, source: str, n: int = 1) -> None:
        self.wakes.add(n, {"source": source})
        self.prom.wakes.labels(source).inc(n)
