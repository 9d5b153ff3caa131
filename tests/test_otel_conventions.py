"""The OpenTelemetry conventions budgetscope's emitters follow: OTEL_SERVICE_NAME, OTEL_SDK_DISABLED, the
http/json exporter protocol, and the GenAI semantic conventions on the spans it emits."""

from __future__ import annotations

from budgetscope.instrument import gpu


def _resource(doc: dict) -> dict:
    return {a["key"]: a["value"]["stringValue"] for a in doc["resourceMetrics"][0]["resource"]["attributes"]}


def _point() -> gpu.Point:
    return gpu.Point(1_700_000_000_000_000_000, gpu.HBM_USED, 1.0e9, "GPU-0", 0)


def test_gpu_exporter_honours_otel_service_name(monkeypatch):
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    assert _resource(gpu.otlp_json([_point()], "node-1"))["service.name"] == "budgetscope-gpu"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gpu-fleet-a")
    assert _resource(gpu.otlp_json([_point()], "node-1")) == {"host.name": "node-1", "service.name": "gpu-fleet-a"}


# -- GenAI conventions on the spans budgetscope emits ------------------------------------------------------------
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from budgetscope.instrument import ClientRequest, ClientTracer, Instrumentation
from budgetscope.instrument import attributes as A
from budgetscope.instrument.client import client_attributes


@pytest.fixture(autouse=True)
def _clean_otel_env(monkeypatch):
    for name in (
        "OTEL_SDK_DISABLED",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "OTEL_SERVICE_NAME",
        "OTEL_TRACES_EXPORTER",
        "OTEL_RESOURCE_ATTRIBUTES",
    ):
        monkeypatch.delenv(name, raising=False)


def _one_request(instr: Instrumentation) -> None:
    req = instr.start_request(model="tiny", tier="interactive")
    req.mark("queue")
    req.mark("prefill")
    req.token()
    req.finish(input_tokens=3, output_tokens=1)
    instr.flush()


def _roots(exporter) -> list:
    return [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]


@pytest.mark.parametrize(
    "kwargs, expected", [({}, "budgetscope"), ({"provider_name": "vllm"}, "vllm"), ({"provider_name": None}, None)]
)
def test_server_root_carries_gen_ai_provider_name(kwargs, expected):
    exporter = InMemorySpanExporter()
    instr = Instrumentation(service_name="svc", exporter=exporter, **kwargs)
    _one_request(instr)
    instr.shutdown()
    (root,) = _roots(exporter)
    assert root.attributes.get(A.GEN_AI_PROVIDER_NAME) == expected


@pytest.mark.parametrize(
    "url, address, port",
    [
        ("http://127.0.0.1:8000/v1/completions", "127.0.0.1", 8000),
        ("https://api.example.com/v1/chat/completions", "api.example.com", 443),
        ("http://[::1]/v1/completions", "::1", 80),
    ],
)
def test_client_span_carries_provider_operation_and_server(url, address, port):
    rec = ClientRequest(1, 2, scheduled_ns=10, start_ns=11, end_ns=20, url=url, operation="chat")
    attrs = client_attributes(rec)
    assert attrs[A.GEN_AI_PROVIDER_NAME] == "openai"
    assert attrs[A.GEN_AI_OPERATION_NAME] == "chat"
    assert (attrs["server.address"], attrs["server.port"]) == (address, port)
    assert attrs["url.full"] == url


def test_loadgen_client_spans_name_the_operation(tmp_path):
    """The load generator's spans, end to end against the stub server: chat vs completions."""
    import orjson

    from budgetscope.loadgen import Arrivals, Distribution, Target, Workload, build_plan, run_load
    from budgetscope.loadgen.stub_server import StubServer

    stub = StubServer().start_in_thread()
    try:
        for path, operation in (("/v1/completions", "text_completion"), ("/v1/chat/completions", "chat")):
            out = tmp_path / f"{operation}.jsonl"
            tracer = ClientTracer(exporter=f"jsonl:{out}")
            plan = build_plan(
                Arrivals.parse("constant", rate=50),
                Workload(prompt_tokens=Distribution.parse("4"), output_tokens=Distribution.parse("2")),
                seed=1,
                num_requests=2,
            )
            run_load(plan, Target(stub.url + path, model="m"), tracer=tracer)
            tracer.shutdown()
            spans = [
                s
                for line in out.read_bytes().splitlines()
                for rs in orjson.loads(line)["resourceSpans"]
                for ss in rs["scopeSpans"]
                for s in ss["spans"]
            ]
            attrs = [{a["key"]: next(iter(a["value"].values())) for a in s["attributes"]} for s in spans]
            assert len(attrs) == 2
            assert {a["gen_ai.operation.name"] for a in attrs} == {operation}
            assert {a["gen_ai.provider.name"] for a in attrs} == {"openai"}
            assert {a["server.address"] for a in attrs} == {"127.0.0.1"}
    finally:
        stub.stop_thread()


# -- OTEL_SDK_DISABLED -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["true", "TRUE", " True "])
def test_otel_sdk_disabled_turns_every_exporter_off(monkeypatch, value, tmp_path):
    from budgetscope.instrument.exporters import otlp_exporter
    from budgetscope.instrument.http_json import DisabledExporter

    monkeypatch.setenv("OTEL_SDK_DISABLED", value)
    exporter = InMemorySpanExporter()
    instr = Instrumentation(exporter=exporter)
    assert not instr.enabled and not instr.is_exporting
    _one_request(instr)
    assert exporter.get_finished_spans() == ()
    tracer = ClientTracer(exporter=f"jsonl:{tmp_path / 'c.jsonl'}")
    assert not tracer.is_exporting
    tracer.record(ClientRequest(1, 2, scheduled_ns=1, start_ns=1, end_ns=2))
    tracer.shutdown()
    assert not (tmp_path / "c.jsonl").exists()
    assert isinstance(otlp_exporter("metrics"), DisabledExporter)  # the GPU sampler's OTLP sink sends nothing


def test_otel_sdk_disabled_false_changes_nothing(monkeypatch):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "false")
    exporter = InMemorySpanExporter()
    instr = Instrumentation(exporter=exporter)
    _one_request(instr)
    instr.shutdown()
    assert len(_roots(exporter)) == 1


# -- http/json -----------------------------------------------------------------------------------------------------
@pytest.fixture
def collector(tmp_path):
    from budgetscope.collector import Collector

    c = Collector(tmp_path / "archive", grpc_port=None, http_port=0)
    c.start()
    yield c
    c.stop()


def test_http_json_protocol_exports_spans_and_gpu_metrics_to_a_collector(monkeypatch, collector, tmp_path):
    from conftest import rows

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{collector.http_port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme%20corp")
    from budgetscope.instrument.exporters import otlp_exporter
    from budgetscope.instrument.http_json import OtlpHttpJsonExporter

    assert isinstance(otlp_exporter("traces"), OtlpHttpJsonExporter)
    assert isinstance(otlp_exporter("metrics"), OtlpHttpJsonExporter)
    instr = Instrumentation(service_name="json-svc", exporter="otlp")
    _one_request(instr)
    instr.shutdown()
    gpu.OtlpSink().export([_point()], "node-1")  # the GPU sampler's OTLP sink, same protocol
    collector.stop()
    got = rows(tmp_path / "archive", "SELECT service_name, tier, input_tokens FROM requests")
    assert got == [("json-svc", "interactive", 3)]
    assert rows(tmp_path / "archive", "SELECT count(*) FROM gpu_samples") == [(1,)]


def test_http_json_body_is_otlp_json(monkeypatch):
    """Ids are hex, enums integers: the OTLP/JSON mapping, not protobuf's default JSON."""
    import http.server
    import json
    import threading

    bodies = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the name http.server calls
            bodies.append((self.path, self.headers, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}/x")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20t0k")
        instr = Instrumentation(service_name="svc", exporter="otlp")
        _one_request(instr)
        instr.shutdown()
    finally:
        server.shutdown()
    ((path, headers, body),) = bodies
    assert path == "/x" and headers.get("content-type") == "application/json"
    assert headers.get("authorization") == "Bearer t0k"
    doc = json.loads(body)
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    root = next(s for s in spans if s["kind"] == 2)
    assert len(root["traceId"]) == 32 and int(root["traceId"], 16) and len(root["spanId"]) == 16
    assert root["kind"] == 2 and isinstance(root["startTimeUnixNano"], str)
    assert all(s["parentSpanId"] == root["spanId"] for s in spans if s is not root)
