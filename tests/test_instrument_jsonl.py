"""The local OTLP JSON lines file: valid OTLP/JSON, the same message the OTLP protobuf encoder makes."""

import base64

import orjson
import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from budgetscope.instrument import Instrumentation
from budgetscope.instrument import attributes as A
from budgetscope.instrument.otlp_json import any_value

INCOMING = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def hex_ids_to_base64(node):
    """OTLP/JSON writes ids as hex; protobuf's JSON parser wants base64 for bytes fields."""
    if isinstance(node, dict):
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode() if k in _ID_KEYS else hex_ids_to_base64(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [hex_ids_to_base64(v) for v in node]
    return node


def parse_line(line: bytes) -> ExportTraceServiceRequest:
    message = ExportTraceServiceRequest()
    json_format.ParseDict(hex_ids_to_base64(orjson.loads(line)), message)  # unknown keys raise
    return message


def run_requests(instr):
    req = instr.start_request(
        model="tiny", tier="interactive", tenant="acme", traceparent=INCOMING, request_id="cmpl-1"
    )
    req.mark("queue")
    req.mark("prefill")
    for _ in range(3):
        req.token()
    req.mark("postprocess")
    req.set("app.flag", True)
    req.finish(outcome="ok", input_tokens=12, output_tokens=3, cached_tokens=0)
    failed = instr.start_request(model="tiny")
    failed.finish(outcome="error", error_type="EngineCrash")
    instr.step(
        start_ns=1_700_000_000_000_000_000,
        end_ns=1_700_000_000_005_000_000,
        batch_size=2,
        prefill_tokens=12,
        decode_seqs=1,
        kv_blocks_used=3,
        kv_blocks_total=64,
        queue_depth=0,
        preempted=0,
    )


def test_jsonl_file_is_otlp_json(tmp_path):
    path = tmp_path / "traces" / "spans.jsonl"
    instr = Instrumentation(service_name="test-engine", exporter=f"jsonl:{path}")
    run_requests(instr)
    instr.shutdown()
    lines = path.read_bytes().splitlines()
    assert lines
    spans = []
    for line in lines:
        raw = orjson.loads(line)
        message = parse_line(line)
        for resource_spans in message.resource_spans:
            attrs = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
            assert attrs["service.name"] == "test-engine"
            for scope_spans in resource_spans.scope_spans:
                assert scope_spans.scope.name == A.SCOPE_NAME
                spans.extend(scope_spans.spans)
        # OTLP/JSON specifics: hex ids, int64 as strings, integer enums, lowerCamelCase keys.
        for span in (s for rs in raw["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]):
            assert len(span["traceId"]) == 32 and int(span["traceId"], 16)
            assert len(span["spanId"]) == 16 and int(span["spanId"], 16)
            assert isinstance(span["startTimeUnixNano"], str) and isinstance(span["endTimeUnixNano"], str)
            assert span["kind"] in (1, 2)
    assert sorted(s.name for s in spans) == sorted(
        [
            "text_completion tiny",
            "stage.frontend",
            "stage.queue",
            "stage.prefill",
            "stage.decode",
            "stage.postprocess",
            "text_completion tiny",
            "stage.frontend",
            "engine.step",
        ]
    )
    root = next(s for s in spans if s.name == "text_completion tiny" and s.parent_span_id)
    assert root.trace_id.hex() == "0af7651916cd43dd8448eb211c80319c"
    assert root.parent_span_id.hex() == "b7ad6b7169203331"
    assert root.kind == root.SPAN_KIND_SERVER
    attrs = {kv.key: kv.value for kv in root.attributes}
    assert attrs[A.GEN_AI_USAGE_INPUT_TOKENS].int_value == 12
    assert attrs[A.OUTCOME].string_value == "ok"
    assert attrs["app.flag"].bool_value is True
    decode = next(s for s in spans if s.name == "stage.decode")
    itl = {kv.key: kv.value for kv in decode.attributes}[A.DECODE_ITL_MS]
    assert len(itl.array_value.values) == 2
    assert all(v.HasField("double_value") for v in itl.array_value.values)
    failed = next(s for s in spans if s.name == "text_completion tiny" and not s.parent_span_id)
    assert failed.status.code == failed.status.STATUS_CODE_ERROR
    assert failed.status.message == "EngineCrash"


def test_jsonl_equals_the_protobuf_encoder(tmp_path):
    """Our JSON, parsed back, is exactly the message the OpenTelemetry OTLP encoder builds."""
    memory = InMemorySpanExporter()
    instr = Instrumentation(exporter=memory)
    run_requests(instr)
    instr.flush()
    instr.shutdown()
    spans = memory.get_finished_spans()
    from budgetscope.instrument.otlp_json import encode_request

    ours = parse_line(orjson.dumps(encode_request(spans)))
    assert ours == encode_spans(spans)


def test_jsonl_appends_one_line_per_export(tmp_path):
    path = tmp_path / "spans.jsonl"
    for _ in range(2):
        instr = Instrumentation(exporter=f"jsonl:{path}")
        instr.start_request().finish()
        instr.flush()
        instr.shutdown()
    assert len(path.read_bytes().splitlines()) == 2


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (True, {"boolValue": True}),
        (2**40, {"intValue": str(2**40)}),
        (1.5, {"doubleValue": 1.5}),
        (float("nan"), {"doubleValue": "NaN"}),
        (float("-inf"), {"doubleValue": "-Infinity"}),
        ("x", {"stringValue": "x"}),
        ((1.0, 2.0), {"arrayValue": {"values": [{"doubleValue": 1.0}, {"doubleValue": 2.0}]}}),
        ((), {"arrayValue": {}}),
        (  # an itl_ms array with non-finite gaps (the all-float fast path), and a mixed one (element by element)
            (0.5, float("inf"), float("nan")),
            {"arrayValue": {"values": [{"doubleValue": 0.5}, {"doubleValue": "Infinity"}, {"doubleValue": "NaN"}]}},
        ),
        ((1.0, 2, True), {"arrayValue": {"values": [{"doubleValue": 1.0}, {"intValue": "2"}, {"boolValue": True}]}}),
    ],
)
def test_any_value_encoding(value, encoded):
    assert any_value(value) == encoded
