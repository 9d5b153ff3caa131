"""A real OTLP export, configured by OTEL_* variables only, reaches a local receiver."""

import gzip
import http.server
import threading
from concurrent import futures

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from budgetscope.instrument import Instrumentation
from budgetscope.instrument import attributes as A


class _Receiver(http.server.BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = trace_service_pb2.ExportTraceServiceRequest()
        message.ParseFromString(body)
        self.received.append((self.path, self.headers.get("Content-Type"), message))
        reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture(autouse=True)
def _clean_otlp_env(monkeypatch):
    for name in (
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "OTEL_RESOURCE_ATTRIBUTES",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def http_receiver():
    _Receiver.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], _Receiver.received
    server.shutdown()
    server.server_close()


def _spans(messages):
    return [
        (resource_spans, span)
        for message in messages
        for resource_spans in message.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]


def _one_request(instr):
    req = instr.start_request(
        model="tiny", tier="interactive", traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    )
    req.mark("queue")
    req.mark("prefill")
    req.token()
    req.token()
    req.finish(outcome="ok", input_tokens=5)


def test_otlp_http_export_reaches_the_receiver(http_receiver, monkeypatch):
    port, received = http_receiver
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "engine-under-test")
    instr = Instrumentation(service_name="ignored")
    _one_request(instr)
    assert instr.flush(timeout_s=10)
    instr.shutdown()
    assert {(path, ctype) for path, ctype, _ in received} == {("/v1/traces", "application/x-protobuf")}
    spans = _spans([message for _, _, message in received])
    assert [span.name for _, span in spans] == [
        "text_completion tiny",
        "stage.frontend",
        "stage.queue",
        "stage.prefill",
        "stage.decode",
    ]
    resource, root = spans[0]
    service = {kv.key: kv.value.string_value for kv in resource.resource.attributes}["service.name"]
    assert service == "engine-under-test"
    assert root.trace_id.hex() == "0af7651916cd43dd8448eb211c80319c"
    assert root.parent_span_id.hex() == "b7ad6b7169203331"
    assert root.kind == root.SPAN_KIND_SERVER
    assert {kv.key: kv.value.string_value for kv in root.attributes}[A.TIER] == "interactive"


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self):
        self.received = []

    def Export(self, request, context):  # noqa: N802 - gRPC's naming
        self.received.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()


def test_otlp_grpc_export_reaches_the_receiver(monkeypatch):
    grpc = pytest.importorskip("grpc")
    service = _TraceService()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        instr = Instrumentation(service_name="grpc-engine", exporter="otlp")
        _one_request(instr)
        assert instr.flush(timeout_s=10)
        instr.shutdown()
    finally:
        server.stop(None)
    assert [span.name for _, span in _spans(service.received)][0] == "text_completion tiny"
    assert len(_spans(service.received)) == 5


def test_unsupported_otlp_protocol_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/thrift")  # http/json is supported (test_otel_conventions)
    with pytest.raises(ValueError, match="'http/thrift'.*http/protobuf, grpc, http/json"):
        Instrumentation(exporter="otlp")


def test_an_endpoint_alone_exports_over_otlp(http_receiver, monkeypatch):
    """OTEL_TRACES_EXPORTER unset: OpenTelemetry's default `otlp` applies once an endpoint says where."""
    port, received = http_receiver
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    instr = Instrumentation()
    assert instr.is_exporting
    _one_request(instr)
    assert instr.flush(timeout_s=10)
    instr.shutdown()
    assert [span.name for _, span in _spans([m for _, _, m in received])][0] == "text_completion tiny"


def test_an_unsampled_parent_exports_no_span():
    """traceparent flags 00: recorded (ids work), no span exported, as the SDK's parentbased_always_on does."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    instr = Instrumentation(exporter=exporter)
    for flags in ("00", "01"):
        req = instr.start_request(
            model="tiny", traceparent=f"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-{flags}"
        )
        req.mark("queue")
        req.finish()
    assert instr.flush()
    instr.shutdown()
    assert [s.name for s in exporter.get_finished_spans() if s.parent is not None and s.parent.is_remote] == [
        "text_completion tiny"
    ]
