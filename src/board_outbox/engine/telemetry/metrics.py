"""Metrics through the OpenTelemetry metrics API (C3).

Instruments (names are stable; see tracing/README.md):
- ``board_outbox.tail.lag`` (gauge, per tenant): allocated seq minus cursor;
- ``board_outbox.rows`` (gauge, per state): rows in trigger_effects;
- ``board_outbox.materialize_to_done`` (histogram, s): row materialized -> done;
- ``board_outbox.attempts`` (histogram): attempts a row needed to finish;
- ``board_outbox.dead_letters`` (counter): rows parked as failed;
- ``board_outbox.wakes`` (counter, source=stream|poll): what woke the tail;
- ``board_outbox.limited`` (counter, scope=bot|tenant, kind=in_flight|per_second): launches
  deferred because they were over a limit (F2);
- ``board_outbox.paused_rows`` (counter, scope=tenant|subscription|bot): rows held because
  their tenant, subscription or bot was paused (F3);
- ``board_outbox.rows.coalesced`` (counter): launch rows superseded by a newer row of their
  (subscription, card) (Prometheus ``board_outbox_rows_coalesced_total``), counted
  where the ``coalesce`` transition is applied;
- ``board_outbox.stream.events`` (counter): inserts this replica's change stream delivered,
  counted before any filtering in the process (S5: summed over replicas, about one per event);
- ``board_outbox.projection.lag`` (gauge, per tenant and projection): materialized seq (the
  tenant's cursor: every event up to it has its projection row) minus applied seq (the highest
  seq of a projection row this replica marked done); across replicas, take the minimum;
- ``board_outbox.projection.applied_seq`` (gauge, per tenant and projection);
- ``board_outbox.projection.rebuild.progress`` (gauge, per tenant and projection, 0..1) and
  ``board_outbox.projection.rebuild.seq`` (gauge): how far a ``rebuild`` has replayed.

Priced per batch, so that telemetry costs little per row: the per-kind instruments are bound
once (the Prometheus label children and the OTel attribute dicts are made on a kind's first row
and reused), and ``rows_done`` takes a whole batch: the projection high-water marks are folded
once per batch; only the two histograms, whose per-row values are the point, see every row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from board_outbox.engine.telemetry.prometheus import PrometheusMirror
from board_outbox.engine.telemetry.propagation import trace_id_of
from board_outbox.model.ids import PROJECTION
from board_outbox.model.rows import EffectRow


class _Bound:
    """One label set's instruments, looked up once: the OTel attributes (one dict, never
    mutated, so the SDK may keep it) and the Prometheus children."""

    __slots__ = ("attempts", "attrs", "dead", "latency")

    def __init__(self, prom: PrometheusMirror, kind: str) -> None:
        self.attrs = {"kind": kind}
        self.latency = prom.latency.labels(kind)
        self.attempts = prom.attempts.labels(kind)
        self.dead = prom.dead.labels(kind)


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
        self.limited = m.create_counter(
            "board_outbox.limited", unit="{row}",
            description="launches deferred over a concurrency or rate limit")
        self.paused_rows = m.create_counter(
            "board_outbox.paused_rows", unit="{row}",
            description="rows held because their tenant, subscription or bot was paused")
        self.coalesced = m.create_counter(
            "board_outbox.rows.coalesced", unit="{row}",
            description="launch rows superseded by a newer row of their (subscription, card)")
        self.stream_events = m.create_counter(
            "board_outbox.stream.events", unit="{event}",
            description="inserts the change stream delivered, before any filtering")
        # (tenant, projection) -> seq; and rebuilds: (tenant, projection) -> (seq reached, head)
        self.materialized: dict[tuple[str, str], int] = {}
        self.applied: dict[tuple[str, str], int] = {}
        self.rebuilds: dict[tuple[str, str], tuple[int, int]] = {}
        m.create_observable_gauge("board_outbox.projection.lag", [self._observe_projection_lag],
                                  unit="{event}",
                                  description="materialized seq minus applied seq, per projection")
        m.create_observable_gauge("board_outbox.projection.applied_seq", [self._observe_applied],
                                  unit="{event}", description="highest seq applied, per projection")
        m.create_observable_gauge("board_outbox.projection.rebuild.progress",
                                  [self._observe_rebuild_progress], unit="1",
                                  description="share of the event log a rebuild has replayed")
        m.create_observable_gauge("board_outbox.projection.rebuild.seq", [self._observe_rebuild_seq],
                                  unit="{event}", description="seq a rebuild has replayed up to")
        self._kinds: dict[str, _Bound] = {}

    def _observe_lag(self, _opts: CallbackOptions) -> Iterable[Observation]:
        return [Observation(v, {"tenant_id": t}) for t, v in sorted(self.lag.items())]

    def _observe_rows(self, _opts: CallbackOptions) -> Iterable[Observation]:
        return [Observation(v, {"state": s}) for s, v in sorted(self.rows.items())]

    @staticmethod
    def _pattrs(key: tuple[str, str]) -> dict[str, str]:
        return {"tenant_id": key[0], "projection": key[1]}

    def projection_lag(self) -> dict[tuple[str, str], int]:
        return {k: max(0, seq - self.applied.get(k, 0)) for k, seq in sorted(self.materialized.items())}

    def _observe_projection_lag(self, _opts: CallbackOptions) -> Iterable[Observation]:
        return [Observation(v, self._pattrs(k)) for k, v in self.projection_lag().items()]

    def _observe_applied(self, _opts: CallbackOptions) -> Iterable[Observation]:
        return [Observation(v, self._pattrs(k)) for k, v in sorted(self.applied.items())]

    def _observe_rebuild_progress(self, _opts: CallbackOptions) -> Iterable[Observation]:
        return [Observation(done / head if head else 1.0, self._pattrs(k))
                for k, (done, head) in sorted(self.rebuilds.items())]

    def _observe_rebuild_seq(self, _opts: CallbackOptions) -> Iterable[Observation]:
        return [Observation(done, self._pattrs(k)) for k, (done, _h) in sorted(self.rebuilds.items())]

    def projection_materialized(self, tenant_id: str, projections: Iterable[str], seq: int) -> None:
        """The tenant's cursor reached ``seq``: every projection has its rows up to there."""
        for name in projections:
            key = (tenant_id, name)
            self.materialized[key] = max(seq, self.materialized.get(key, 0))

    def rebuild_progress(self, tenant_id: str, projection: str, seq: int, head: int) -> None:
        self.rebuilds[(tenant_id, projection)] = (seq, max(seq, head))

    def _bound(self, kind: str) -> _Bound:
        b = self._kinds.get(kind)
        if b is None:
            b = self._kinds[kind] = _Bound(self.prom, kind)
        return b

    def row_done(self, row: EffectRow, now: float) -> None:
        self.rows_done((row,), now)

    def rows_done(self, rows: Sequence[EffectRow], now: float) -> None:
        """A batch of rows marked done at ``now``: the projection high-water marks folded once,
        each row's latency and attempts into the histograms through bound instruments."""
        applied: dict[tuple[str, str], int] = {}
        kinds = self._kinds
        latency, attempts = self.latency.record, self.attempts.record
        effect = self.prom.effect_latency
        for row in rows:
            kind = row.kind
            b = kinds.get(kind) or self._bound(kind)
            if row.materialized_at:
                waited = now - row.materialized_at
                waited = waited if waited > 0.0 else 0.0
                latency(waited, b.attrs)
                b.latency.observe(waited)
            if row.event is not None and row.event.at > 0:  # A5: per tenant, with the trace link
                trace_id = trace_id_of(row.trace.traceparent) if row.trace is not None else None
                effect.labels(row.tenant_id, kind).observe(
                    max(0.0, now - row.event.at),
                    exemplar={"trace_id": trace_id} if trace_id else None)
            n = row.attempts + 1
            attempts(n, b.attrs)
            b.attempts.observe(n)
            if kind == PROJECTION and row.projection is not None:
                key = (row.tenant_id, row.projection)
                if row.seq > applied.get(key, 0):
                    applied[key] = row.seq
        for key, seq in applied.items():
            if seq > self.applied.get(key, 0):
                self.applied[key] = seq

    def row_failed(self, kind: str) -> None:
        b = self._bound(kind)
        self.dead.add(1, b.attrs)
        b.dead.inc()

    def row_limited(self, scope: str, kind: str) -> None:
        """A launch was deferred over a limit (F2)."""
        self.limited.add(1, {"scope": scope, "kind": kind})
        self.prom.limited.labels(scope, kind).inc()

    def row_paused(self, scope: str) -> None:
        """A row was held by a pause of its ``scope`` (F3)."""
        self.paused_rows.add(1, {"scope": scope})
        self.prom.paused_rows.labels(scope).inc()

    def row_coalesced(self) -> None:
        """A launch row moved to ``coalesced`` (a newer row of its burst runs instead)."""
        self.coalesced.add(1)
        self.prom.coalesced.inc()

    def stream_event(self) -> None:
        self.stream_events.add(1)
        self.prom.stream_events.inc()

    def wake(self, source: str, n: int = 1) -> None:
        self.wakes.add(n, {"source": source})
        self.prom.wakes.labels(source).inc(n)
