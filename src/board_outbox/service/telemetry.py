"""OpenTelemetry SDK setup from the standard OTEL_* environment variables (C3, C5).

Traces are exported when ``OTEL_TRACES_EXPORTER`` is ``otlp`` or ``console``, or when an OTLP
endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``..._TRACES_ENDPOINT``); metrics only when
asked for (``OTEL_METRICS_EXPORTER`` or ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``), since Jaeger
takes no metrics. The protocol follows ``OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]PROTOCOL``:
``http/protobuf`` (default; Jaeger's OTLP/HTTP receiver on :4318) or ``grpc`` (:4317). Endpoints,
headers, timeouts and TLS are read by the exporters themselves from the same variables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from board_outbox.model.errors import ConfigError


@dataclass
class Telemetry:
    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    described: list[str] = field(default_factory=list)

    def shutdown(self) -> None:
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


def _wanted(env: Mapping[str, str], signal: str) -> str | None:
    exporter = env.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower()
    if exporter in ("none",):
        return None
    if exporter in ("otlp", "console"):
        return exporter
    if exporter:
        raise ConfigError(f"OTEL_{signal.upper()}_EXPORTER: {exporter!r} is not otlp, console or none")
    if env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"):
        return "otlp"
    # The shared endpoint turns on traces only: Jaeger, the usual target, takes no metrics.
    if signal == "traces" and env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return "otlp"
    return None


def _protocol(env: Mapping[str, str], signal: str) -> str:
    proto = (env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
             or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip().lower()
    if proto not in ("http/protobuf", "grpc"):
        raise ConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL: {proto!r} is not http/protobuf or grpc "
            "(http/json is not supported by the Python exporters)"
        )
    return proto


def span_exporter(env: Mapping[str, str]) -> SpanExporter | None:
    kind = _wanted(env, "traces")
    if kind is None:
        return None
    if kind == "console":
        return ConsoleSpanExporter()
    if _protocol(env, "traces") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as G

        return G()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as H

    return H()


def metric_exporter(env: Mapping[str, str]) -> MetricExporter | None:
    kind = _wanted(env, "metrics")
    if kind is None:
        return None
    if kind == "console":
        return ConsoleMetricExporter()
    if _protocol(env, "metrics") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as G

        return G()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as H

    return H()


def setup_telemetry(
    env: Mapping[str, str] | None = None,
    *,
    service_name: str = "board-outbox",
    replica: str = "",
    extra_processor: SpanProcessor | None = None,
) -> Telemetry:
    """Install global tracer/meter providers. With nothing configured, the API stays a no-op."""
    env = os.environ if env is None else env
    attrs = {"service.name": env.get("OTEL_SERVICE_NAME", service_name)}
    if replica:
        attrs["service.instance.id"] = replica
    resource = Resource.create(attrs)
    tel = Telemetry()
    exporter = span_exporter(env)
    if exporter is not None or extra_processor is not None:
        tp = TracerProvider(resource=resource)
        if exporter is not None:
            tp.add_span_processor(BatchSpanProcessor(exporter))
            tel.described.append(f"traces -> {type(exporter).__module__.split('.')[-2]}"
                                 f" {type(exporter).__name__}")
        if extra_processor is not None:
            tp.add_span_processor(extra_processor)
        trace.set_tracer_provider(tp)
        tel.tracer_provider = tp
    mexp = metric_exporter(env)
    if mexp is not None:
        reader = PeriodicExportingMetricReader(mexp)
        mp = MeterProvider(resource=resource, metric_readers=[reader])
        metrics.set_meter_provider(mp)
        tel.meter_provider = mp
        tel.described.append(f"metrics -> {type(mexp).__name__}")
    return tel
