"""OpenTelemetry SDK setup from the standard OTEL_* environment variables (C3, C5, C7).

- ``OTEL_SDK_DISABLED=true``: no SDK at all; the API stays a no-op (contexts still propagate).
- A signal (traces, metrics, logs) is exported when ``OTEL_<SIGNAL>_EXPORTER`` is ``otlp`` or
  ``console``, or when an OTLP endpoint applies to it: its own
  ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`` or the shared ``OTEL_EXPORTER_OTLP_ENDPOINT``, which
  turns on every signal, as the specification says (``OTEL_<SIGNAL>_EXPORTER=none`` turns one
  off: Jaeger, for one, takes traces only). With nothing set nothing is exported and tracing
  costs nothing (the specification's default would export to localhost).
- Protocol per signal: ``OTEL_EXPORTER_OTLP_[<SIGNAL>_]PROTOCOL``, ``http/protobuf`` (default;
  :4318) or ``grpc`` (:4317). Endpoints, headers, timeouts and TLS are read by the exporters
  themselves from the same variables.
- Sampling: ``OTEL_TRACES_SAMPLER`` (``always_on``, ``always_off``, ``traceidratio``,
  ``parentbased_always_on`` -- the default --, ``parentbased_always_off``,
  ``parentbased_traceidratio``) and ``OTEL_TRACES_SAMPLER_ARG`` (the ratio, 0..1).
- Logs: the service's log records (JSON or text on stderr as before) are also exported as OTLP
  log records, with their trace context, when the logs signal is on.

A bad value is a ``ConfigError``: one line, exit 2.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import _logs as logs_api
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    ConsoleLogRecordExporter,
    LogRecordExporter,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_OFF,
    DEFAULT_ON,
    ParentBasedTraceIdRatio,
    Sampler,
    TraceIdRatioBased,
)

from board_outbox.model.errors import ConfigError
from board_outbox.service.logs import CONTEXT_FIELDS

SIGNALS = ("traces", "metrics", "logs")
_FIXED_SAMPLERS: dict[str, Sampler] = {
    "always_on": ALWAYS_ON, "always_off": ALWAYS_OFF,
    "parentbased_always_on": DEFAULT_ON, "parentbased_always_off": DEFAULT_OFF,
}
_RATIO_SAMPLERS = {"traceidratio": TraceIdRatioBased,
                   "parentbased_traceidratio": ParentBasedTraceIdRatio}


@dataclass
class Telemetry:
    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    logger_provider: LoggerProvider | None = None
    log_handler: logging.Handler | None = None
    described: list[str] = field(default_factory=list)

    def shutdown(self) -> None:
        if self.log_handler is not None:
            logging.getLogger().removeHandler(self.log_handler)
        for provider in (self.tracer_provider, self.meter_provider, self.logger_provider):
            if provider is not None:
                provider.shutdown()


def sdk_disabled(env: Mapping[str, str]) -> bool:
    return env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def _wanted(env: Mapping[str, str], signal: str) -> str | None:
    exporter = env.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower()
    if exporter == "none":
        return None
    if exporter in ("otlp", "console"):
        return exporter
    if exporter:
        raise ConfigError(f"OTEL_{signal.upper()}_EXPORTER: {exporter!r} is not otlp, console or none")
    if env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
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


def sampler(env: Mapping[str, str]) -> Sampler:
    """The trace sampler ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG`` name (default:
    ``parentbased_always_on``). Unlike the SDK, a name or ratio that does not parse is an
    error, not a silent fallback to sampling everything."""
    name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower() or "parentbased_always_on"
    if name in _FIXED_SAMPLERS:
        return _FIXED_SAMPLERS[name]
    if name not in _RATIO_SAMPLERS:
        known = ", ".join([*_FIXED_SAMPLERS, *_RATIO_SAMPLERS])
        raise ConfigError(f"OTEL_TRACES_SAMPLER: {name!r} is not one of {known}")
    arg = env.get("OTEL_TRACES_SAMPLER_ARG", "").strip() or "1.0"
    try:
        ratio = float(arg)
    except ValueError:
        ratio = math.nan
    if not 0.0 <= ratio <= 1.0:  # NaN fails too
        raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG: {arg!r} is not a ratio from 0 to 1")
    return _RATIO_SAMPLERS[name](ratio)


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


def log_exporter(env: Mapping[str, str]) -> LogRecordExporter | None:
    kind = _wanted(env, "logs")
    if kind is None:
        return None
    if kind == "console":
        return ConsoleLogRecordExporter()
    if _protocol(env, "logs") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as G

        return G()
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as H

    return H()


_SEVERITY = ((logging.CRITICAL, logs_api.SeverityNumber.FATAL),
             (logging.ERROR, logs_api.SeverityNumber.ERROR),
             (logging.WARNING, logs_api.SeverityNumber.WARN),
             (logging.INFO, logs_api.SeverityNumber.INFO),
             (logging.DEBUG, logs_api.SeverityNumber.DEBUG))


class OtlpLogHandler(logging.Handler):
    """Sends each log record to the OpenTelemetry logs pipeline: the message, the severity, the
    context fields the JSON lines carry, and the current trace context (the SDK reads it from
    ``context``). The exporters' own records are left out: a failing export must not feed
    itself."""

    def __init__(self, provider: LoggerProvider) -> None:
        super().__init__()
        self.provider = provider

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("opentelemetry"):
            return
        try:
            number = next((n for level, n in _SEVERITY if record.levelno >= level),
                          logs_api.SeverityNumber.TRACE)
            attrs: dict[str, Any] = {f: getattr(record, f) for f in CONTEXT_FIELDS
                                     if isinstance(getattr(record, f, None), (str, int, float))}
            if record.exc_info and record.exc_info[1] is not None:
                attrs["exception.type"] = type(record.exc_info[1]).__name__
            self.provider.get_logger(record.name).emit(logs_api.LogRecord(
                timestamp=int(record.created * 1e9), observed_timestamp=time.time_ns(),
                context=otel_context.get_current(), severity_text=record.levelname,
                severity_number=number, body=record.getMessage(), attributes=attrs))
        except Exception:  # a log line must never break the caller
            self.handleError(record)


def setup_telemetry(
    env: Mapping[str, str] | None = None,
    *,
    service_name: str = "board-outbox",
    replica: str = "",
    extra_processor: SpanProcessor | None = None,
) -> Telemetry:
    """Install global tracer/meter/logger providers as the OTEL_* variables ask. With nothing
    configured, or ``OTEL_SDK_DISABLED=true``, the API stays a no-op."""
    env = os.environ if env is None else env
    tel = Telemetry()
    if sdk_disabled(env):
        tel.described.append("OpenTelemetry SDK disabled (OTEL_SDK_DISABLED)")
        return tel
    attrs = {"service.name": env.get("OTEL_SERVICE_NAME", service_name)}
    if replica:
        attrs["service.instance.id"] = replica
    resource = Resource.create(attrs)
    exporter = span_exporter(env)
    chosen = sampler(env)  # checked even when no exporter: a typo is reported at once
    if exporter is not None or extra_processor is not None:
        tp = TracerProvider(resource=resource, sampler=chosen)
        if exporter is not None:
            tp.add_span_processor(BatchSpanProcessor(exporter))
            tel.described.append(f"traces -> {type(exporter).__module__.split('.')[-2]}"
                                 f" {type(exporter).__name__} ({chosen.get_description()})")
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
    lexp = log_exporter(env)
    if lexp is not None:
        lp = LoggerProvider(resource=resource)
        lp.add_log_record_processor(BatchLogRecordProcessor(lexp))
        logs_api.set_logger_provider(lp)
        tel.logger_provider = lp
        tel.log_handler = OtlpLogHandler(lp)
        logging.getLogger().addHandler(tel.log_handler)
        tel.described.append(f"logs -> {type(lexp).__name__}")
    return tel
