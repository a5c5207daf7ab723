"""A small OTLP trace receiver: OTLP/HTTP (protobuf, POST /v1/traces) and OTLP/gRPC
(TraceService/Export), decoding ``opentelemetry-proto`` messages exactly as Jaeger's OTLP
receiver does, and keeping the spans (optionally appending them as OTLP JSON lines to a file).
Log records (POST /v1/logs) are kept too, with their trace and span ids; metrics are accepted
and dropped.

For tests, and for trying board-outbox's tracing without a Jaeger binary:

    python -m tracing.otlp_receiver --http 4318 --grpc 4317 --out spans.jsonl
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class SpanSink:
    """What the receivers got: decoded requests, and a flat list of spans as dicts."""

    def __init__(self, out: Path | None = None, keep: bool = True) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.log_requests: list[ExportLogsServiceRequest] = []
        self.out = out
        self.keep = keep  # False: count the spans only (a long benchmark run)
        self.received = 0
        self._lock = threading.Lock()

    def add(self, req: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.received += sum(len(ss.spans) for rs in req.resource_spans
                                 for ss in rs.scope_spans)
            if not self.keep:
                return
            self.requests.append(req)
            if self.out is not None:
                with self.out.open("a") as f:
                    f.write(json.dumps(otlp_json(req)) + "\n")

    def spans(self) -> list[dict[str, Any]]:
        out = []
        with self._lock:
            for req in self.requests:
                for rs in req.resource_spans:
                    service = next((a.value.string_value for a in rs.resource.attributes
                                    if a.key == "service.name"), "")
                    for ss in rs.scope_spans:
                        for s in ss.spans:
                            out.append({
                                "service": service,
                                "name": s.name,
                                "trace_id": s.trace_id.hex(),
                                "span_id": s.span_id.hex(),
                                "parent_span_id": s.parent_span_id.hex(),
                                "start": s.start_time_unix_nano,
                                "end": s.end_time_unix_nano,
                                "attributes": {a.key: _value(a.value) for a in s.attributes},
                                "links": [(ln.trace_id.hex(), ln.span_id.hex()) for ln in s.links],
                                "kind": s.kind,
                                "events": [e.name for e in s.events],
                                "status": s.status.code,
                            })
        return out

    def add_logs(self, req: ExportLogsServiceRequest) -> None:
        with self._lock:
            self.log_requests.append(req)

    def logs(self) -> list[dict[str, Any]]:
        """The log records received: body, severity, attributes, trace and span ids (hex)."""
        with self._lock:
            return [{"body": _value(r.body), "severity": r.severity_text,
                     "trace_id": r.trace_id.hex(), "span_id": r.span_id.hex(),
                     "attributes": {a.key: _value(a.value) for a in r.attributes}}
                    for req in self.log_requests for rl in req.resource_logs
                    for sl in rl.scope_logs for r in sl.log_records]

    def wait_for(self, pred: Any, timeout: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            spans = self.spans()
            if pred(spans):
                return spans
            time.sleep(0.02)
        raise TimeoutError(f"receiver got {len(self.spans())} spans, condition never held")


def otlp_json(req: ExportTraceServiceRequest) -> dict[str, Any]:
    """OTLP JSON as the spec (and the collector's file exporter) writes it: camelCase keys,
    trace and span ids as HEX strings (the plain protobuf JSON mapping would give base64)."""
    doc = MessageToDict(req)

    def fix(obj: Any) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                    obj[k] = base64.b64decode(v).hex()
                else:
                    fix(v)
        elif isinstance(obj, list):
            for v in obj:
                fix(v)

    fix(doc)
    return doc


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _http_handler(sink: SpanSink) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path == "/v1/metrics":  # accepted and dropped: this receiver keeps traces
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path not in ("/v1/traces", "/v1/logs"):
                self.send_error(404)
                return
            if self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_error(415, "OTLP/HTTP protobuf expected")
                return
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/v1/logs":
                logs = ExportLogsServiceRequest()
                logs.ParseFromString(body)
                sink.add_logs(logs)
                payload = ExportLogsServiceResponse().SerializeToString()
            else:
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                sink.add(req)
                payload = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def http_receiver(sink: SpanSink, port: int = 0) -> Iterator[str]:
    """Serve OTLP/HTTP on 127.0.0.1; yield the endpoint (http://127.0.0.1:PORT)."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _http_handler(sink))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def grpc_receiver(sink: SpanSink, port: int = 0) -> Iterator[str]:
    """Serve OTLP/gRPC on 127.0.0.1; yield the endpoint (http://127.0.0.1:PORT)."""
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            sink.add(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield f"http://127.0.0.1:{bound}"
    finally:
        server.stop(grace=None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--http", type=int, default=4318, help="OTLP/HTTP port (default 4318)")
    ap.add_argument("--grpc", type=int, default=4317, help="OTLP/gRPC port (default 4317)")
    ap.add_argument("--out", type=Path, default=Path("spans.jsonl"),
                    help="append received requests as OTLP JSON lines (default spans.jsonl)")
    ap.add_argument("--count-only", action="store_true",
                    help="keep nothing, write nothing: print the spans received so far on each "
                         "line read from stdin (for benchmarks)")
    args = ap.parse_args()
    sink = SpanSink(None if args.count_only else args.out, keep=not args.count_only)
    with http_receiver(sink, args.http) as h, grpc_receiver(sink, args.grpc) as g:
        where = "counting only" if args.count_only else f"writing {args.out}"
        print(f"OTLP receiver: HTTP {h}/v1/traces, gRPC {g}; {where}; Ctrl-C stops", flush=True)
        try:
            if args.count_only:
                for _ in sys.stdin:
                    print(sink.received, flush=True)
            else:
                while True:
                    time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
