"""``/metrics``: the per-scrape gauges and the runtime's counters, read from a running
``Service`` (its status snapshot, refreshed every ``service.metrics_interval_seconds``, and its
stats). Counters and histograms recorded as things happen are in ``telemetry/prometheus.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from board_outbox.model.bad_documents import BAD_DOCUMENTS

if TYPE_CHECKING:
    from board_outbox.service.runtime import Service


def exposition(registry: CollectorRegistry, accept: str) -> tuple[str, bytes]:
    """``/metrics``' body and content type for the scraper's ``Accept`` header: OpenMetrics
    (with the latency histogram's trace-id exemplars, A5) when it asks for
    ``application/openmetrics-text``, the Prometheus text format otherwise (exemplars dropped).
    Plain function of (registry, header), so any HTTP server can serve it."""
    encode, content_type = choose_encoder(accept)
    return content_type, encode(registry)


class ServiceCollector(Collector):
    def __init__(self, service: Service) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        svc, stats = self.service, self.service.stats
        status = sorted(svc.status.values(), key=lambda s: s.tenant_id)

        def per_tenant(name: str, doc: str, unit: str, values: list[tuple[str, float]]) -> Metric:
            g = GaugeMetricFamily(name, doc, labels=["tenant_id"], unit=unit)
            for tenant, v in values:
                g.add_metric([tenant], v)
            return g

        yield per_tenant("board_outbox_tail_lag_events", "allocated seq minus cursor, per tenant", "",
                         [(s.tenant_id, s.lag_events) for s in status])
        yield per_tenant("board_outbox_tail_lag_seconds",
                         "age of the oldest event past the cursor, per tenant", "seconds",
                         [(s.tenant_id, s.lag_seconds) for s in status])
        yield per_tenant("board_outbox_cursor", "the tail's cursor (last materialized seq)", "",
                         [(s.tenant_id, s.cursor) for s in status])
        yield per_tenant("board_outbox_oldest_pending_age_seconds",
                         "age of the oldest pending or claimed row, per tenant", "seconds",
                         [(s.tenant_id, s.oldest_pending_age_seconds) for s in status
                          if s.oldest_pending_age_seconds is not None])
        yield per_tenant("board_outbox_dead_letter_rows", "rows parked as failed now, per tenant", "",
                         [(s.tenant_id, s.dead_letters) for s in status])
        yield per_tenant("board_outbox_rows_waiting_on_limit",
                         "pending rows deferred over a concurrency or rate limit (F2), per tenant",
                         "", [(s.tenant_id, s.waiting_on_limit) for s in status])
        yield per_tenant("board_outbox_rows_held_by_pause",
                         "pending rows held by a pause of their tenant, subscription or bot, "
                         "per tenant", "",
                         [(s.tenant_id, s.held_by_pause) for s in status])
        if svc.pauses is not None:
            pauses = GaugeMetricFamily("board_outbox_pauses",
                                       "pauses on, by scope, as this replica last read them",
                                       labels=["scope"])
            for scope, n in svc.pauses.by_scope().items():
                pauses.add_metric([scope], n)
            yield pauses
        yield per_tenant("board_outbox_tenant_stalled",
                         "1 while the tenant is behind and its cursor has not moved for "
                         "tail.stall_seconds", "", [(s.tenant_id, int(s.stalled)) for s in status])
        yield per_tenant("board_outbox_tenant_stalled_seconds", "how long the tenant has been stalled",
                         "seconds", [(s.tenant_id, s.stalled_for_seconds) for s in status])
        yield per_tenant("board_outbox_audit_missing_rows",
                         "rows the background audit found missing for events the cursor passed "
                         "(still missing at its last look), per tenant", "",
                         list(svc.audit.missing_rows().items()))
        rows = GaugeMetricFamily("board_outbox_rows", "effect rows by state", labels=["state"])
        for state, n in sorted(svc.metrics.rows.items()):
            rows.add_metric([state], n)
        yield rows

        def counter(name: str, doc: str, value: float) -> Metric:
            return CounterMetricFamily(name, doc, value=value)

        w = stats.worker
        yield counter("board_outbox_lease_steals",
                      "claims this replica lost to an expired lease (skipped or late marks no-ops)",
                      w.lease_lost + w.skipped_expired)
        yield counter("board_outbox_cas_lost", "cursor compare-and-sets lost to another replica",
                      stats.cas_lost)
        yield counter("board_outbox_stream_reopens", "change stream losses and interruptions",
                      stats.stream_reopens)
        yield counter("board_outbox_events_materialized",
                      "events whose rows are durable and that this replica's cursor moved past "
                      "(summed over replicas, each event once: a batch two replicas raced on is "
                      "counted by the one whose compare-and-set won)", stats.events_passed)
        yield counter("board_outbox_rows_inserted", "effect rows inserted by the tail", stats.rows_inserted)
        yield counter("board_outbox_drains", "drain passes", stats.drains)
        outcomes = CounterMetricFamily("board_outbox_worker_rows", "claimed rows by outcome",
                                       labels=["outcome"])
        for f in w.__struct_fields__:
            outcomes.add_metric([f], getattr(w, f))
        yield outcomes
        yield GaugeMetricFamily("board_outbox_change_stream_open", "1 while the change stream is open",
                                value=int(svc.stream_open))
        yield GaugeMetricFamily("board_outbox_poll_only",
                                "1 while change streams are on but the stream is closed: events "
                                "flow on the poll net alone", value=int(svc.poll_only))
        watch = svc.worker.watch
        yield counter("board_outbox_event_loop_stalls",
                      "times the event loop was blocked for more than 1 s (a warning names the "
                      "plugin step running then)", watch.stalls)
        yield GaugeMetricFamily("board_outbox_event_loop_max_lag_seconds",
                                "the longest event-loop block seen by this replica",
                                value=watch.max_lag, unit="seconds")
        yield counter("board_outbox_resume_tokens_dropped",
                      "stored resume tokens the server refused, dropped", stats.tokens_dropped)
        bad = CounterMetricFamily("board_outbox_bad_documents",
                                  "distinct malformed stored documents met, by collection "
                                  "(each left out alone; listed by status --json)",
                                  labels=["collection"])
        for coll, n in sorted(BAD_DOCUMENTS.counts.items()):
            bad.add_metric([coll], n)
        yield bad
        yield per_tenant("board_outbox_cursor_ahead",
                         "1 while the tenant's cursor is ahead of its counter: held, not drained, "
                         "until `cursor reset`", "",
                         [(t, 1) for t in sorted(svc.tail.cursor_ahead)])
        if svc.history_headroom is not None:
            yield GaugeMetricFamily(
                "board_outbox_change_stream_headroom_seconds",
                "the saved resume token's save time minus the oldest change the server keeps "
                "(oplog window minus token age); below 0 the token can no longer resume",
                value=svc.history_headroom, unit="seconds")
