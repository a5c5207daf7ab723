"""The Prometheus side of the metrics (O1): prometheus_client instruments on one registry per
service, beside the OTel ones in ``metrics.py`` (which keep going out over OTLP). Counters and
histograms the worker and runtime record into live here; the per-scrape gauges (lag, rows,
stalls, ...) are added by ``board_outbox.surface.http.metrics.ServiceCollector``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
ATTEMPT_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20)


class PrometheusMirror:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.latency = Histogram(
            "board_outbox_materialize_to_done_seconds", "row materialized -> done",
            ["kind"], buckets=LATENCY_BUCKETS, registry=self.registry)
        # A5: event insert -> row done per tenant and kind; each observation carries the row's
        # trace id as an exemplar (served with an OpenMetrics scrape)
        self.effect_latency = Histogram(
            "board_outbox_effect_latency_seconds", "event insert -> row done, per tenant and kind",
            ["tenant_id", "kind"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.attempts = Histogram(
            "board_outbox_attempts", "attempts a row needed to finish",
            ["kind"], buckets=ATTEMPT_BUCKETS, registry=self.registry)
        self.dead = Counter("board_outbox_dead_letters", "rows this replica parked as failed",
                            ["kind"], registry=self.registry)
        self.wakes = Counter("board_outbox_wakes", "tail wakes by source", ["source"],
                             registry=self.registry)
        self.limited = Counter(
            "board_outbox_limited", "launches this replica deferred over a concurrency or rate "
            "limit (F2)", ["scope", "kind"], registry=self.registry)
        self.paused_rows = Counter(
            "board_outbox_paused_rows", "rows this replica held because their tenant, "
            "subscription or bot was paused by an operator", ["scope"], registry=self.registry)
        self.coalesced = Counter(
            "board_outbox_rows_coalesced", "launch rows this replica moved to coalesced: "
            "superseded by a newer row of their (subscription, card) within its quiet time",
            registry=self.registry)
        self.stream_events = Counter(
            "board_outbox_stream_events", "inserts the change stream delivered, before any "
            "filtering in the process", registry=self.registry)
