"""What the fuzzers found stays fixed: every input under fuzz/regressions/TARGET/ (and the seed corpus,
fuzz/corpus/TARGET/) replayed through its target (fuzz/targets.py) — in this process against the installed
extension, and for the C decoder targets once more in a process of their own under ASan + UBSan."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from otlp_wire import MS, T0, attrs, export, span, span_id, trace_id

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fuzz"))

import targets


def _inputs(target: str) -> list[Path]:
    return [f for d in ("fuzz/regressions", "fuzz/corpus") for f in sorted((ROOT / d / target).glob("*"))]


@pytest.mark.parametrize("target", sorted(targets.TARGETS))
def test_saved_inputs_replay_clean(target):
    files = _inputs(target)
    assert files, f"no seeds for {target}: python fuzz/seeds.py"
    check = targets.TARGETS[target]
    for f in files:
        try:
            check(f.read_bytes())
        except targets.Finding as e:
            pytest.fail(f"{f.relative_to(ROOT)}: {e}")


@pytest.mark.slow
def test_saved_inputs_replay_clean_under_asan_and_ubsan():
    import build

    if reason := build.unavailable():
        pytest.skip(reason)
    for target in sorted(targets.SANITIZED):
        dirs = [str(ROOT / d / target) for d in ("fuzz/regressions", "fuzz/corpus") if (ROOT / d / target).is_dir()]
        r = subprocess.run(
            [sys.executable, str(ROOT / "fuzz/run.py"), target, "--replay", *dirs],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0 and " 0 failed" in r.stdout, f"{target}:\n{(r.stdout + r.stderr)[-6000:]}"


# -- the findings, each as a plain test as well ----------------------------------------------------------------


def test_buf_put_of_nothing_into_an_empty_buffer_is_defined():
    """UBSan: `memcpy(NULL, src, 0)` in buf_put, when the first escaped string of a process began with its
    escape (the scratch buffer not yet allocated). Replayed under UBSan by the test above; here the batch
    must still be left to the other paths (an escaped resource key)."""
    from budgetscope.ingest import otlp_fast

    raw = (ROOT / "fuzz/regressions/otlpjson/ubsan-buf-put-null-scratch.json").read_bytes()
    assert b'"\\u0073ervice.name"' in raw
    _, taken, left, _ = otlp_fast.decode([raw], [1])
    assert (taken, left) == ({}, [1])


def test_a_json_line_that_is_not_utf8_is_rejected_alone(tmp_path, ingest_text, archive_path):
    """DuckDB quotes the document in its error, and a quote that is not UTF-8 reached Python as a
    UnicodeDecodeError, not a duckdb.Error: the ingest failed whole instead of rejecting the one line."""
    good = export([span(trace_id(), span_id(), "op", T0, T0 + MS)])
    import json

    lines = [json.dumps(good).encode()] + [b'{"resourceSpans":[]}'] * 5000 + [b'{"resourc\x93\xac\x8f\x9ens":[]}']
    rep = ingest_text(archive_path, b"\n".join(lines) + b"\n")
    assert [r.position for r in rep.rejected] == ["line 5002"]
    assert rep.spans_inserted == 1


def test_an_attribute_value_of_an_unknown_kind_is_skipped_by_every_path():
    """OTLP/JSON receivers must ignore fields they do not know. The DuckDB path stored such a value as null;
    the reference decoder rejected the batch (KeyError), so the same span landed or not by which path took it."""
    from budgetscope.ingest import otlp_json

    a = attrs({"k": "v"}) + [
        {"key": "future", "value": {"futureValue": 1}},
        {"key": "later", "value": {"futureValue": 1, "intValue": "3"}},
    ]
    batch = otlp_json.decode(
        export([span(trace_id(), span_id(), "op", T0, T0 + MS, attributes=None) | {"attributes": a}])
    )
    assert batch.attributes == [b'{"k":"v","future":null,"later":3}']
    raw = (ROOT / "fuzz/regressions/otlpjson_diff/diff-unknown-value-kind.json").read_bytes()
    targets.otlpjson_diff(raw)


def test_an_escaped_resource_key_is_left_to_the_paths_that_decode_it():
    """`"\\u0073ervice.name"` is service.name: the C decoder compared the raw text and stored no service_name
    (the DuckDB path and the reference decoder store it). It now leaves such a batch to them."""
    raw = (ROOT / "fuzz/regressions/otlpjson/ubsan-buf-put-null-scratch.json").read_bytes()
    targets.otlpjson_diff(raw)
    assert targets._duckdb_rows(raw)[0][8] == "engine"


def test_prometheus_lines_end_at_newline_only():
    """str.splitlines() also broke lines at \\v, \\f, \\x85 and U+2028: a label value holding one made a valid
    body an error, and `d 2 1\\v T1 -1000` two samples where prometheus_client reads one."""
    from budgetscope.sources.prometheus import parse

    (s,) = parse('a{x="foo\u2028bar\x85\x0bbaz"} 1\r\n')
    assert (s.metric, s.labels, s.value) == ("a", {"x": "foo\u2028bar\x85\x0bbaz"}, 1.0)
    targets.prometheus((ROOT / "fuzz/regressions/prometheus/vertical-tab-is-not-a-line-break.txt").read_bytes())


@pytest.mark.parametrize(
    "point, error",
    [
        ({"timeUnixNano": str(1 << 63)}, "invalid timeUnixNano"),
        ({"attributes": attrs({"gpu.uuid": "GPU-1", "gpu.index": 1 << 40})}, "gpu.index 1099511627776 is out of range"),
        ({"attributes": attrs({"gpu.uuid": 3})}, "gpu.uuid .or hw.id. 3 is not a string"),
        ({"attributes": attrs({"gpu.uuid": "GPU-1", "host.name": 7})}, "host.name 7 is not a string"),
    ],
)
def test_metrics_points_past_the_tables_types_are_a_bad_batch(point, error):
    """A time past int64 or a GPU index past int32 raised pyarrow's OverflowError while landing, and a GPU id or
    host given as an intValue its ArrowTypeError, failing the whole ingest (or collector group) instead of
    rejecting the one batch."""
    from budgetscope.ingest import otlp_metrics
    from budgetscope.ingest.spanbatch import BadBatch

    dp = {"timeUnixNano": str(T0), "asDouble": 0.5, "attributes": attrs({"gpu.uuid": "GPU-1"})} | point
    doc = {
        "resourceMetrics": [
            {"scopeMetrics": [{"metrics": [{"name": "hw.gpu.utilization", "gauge": {"dataPoints": [dp]}}]}]}
        ]
    }
    import json

    with pytest.raises(BadBatch, match=error):
        otlp_metrics.decode_json(json.dumps(doc).encode())


def test_a_query_of_no_statement_is_a_query_error(tmp_path):
    """Blank SQL (or only a comment) made DuckDB return no cursor: an AttributeError traceback."""
    from budgetscope.opener import Archive
    from budgetscope.query import QueryError, run_query

    Archive(tmp_path / "a").close()
    for sql in ("", "  ", "-- nothing\n"):
        with pytest.raises(QueryError, match="no SQL statement"):
            run_query(tmp_path / "a", sql)


def test_the_first_string_service_name_is_the_service_on_every_path(archive_path, ingest_text, monkeypatch):
    """The reference decoder took service.name from the attributes dict: the last of two (the C decoder and the
    DuckDB path take the first), and a number as it was, which failed the whole ingest in pyarrow
    (ArrowTypeError) for a batch that reached the reference path (here: through a nested value)."""
    from budgetscope.ingest import otlp_fast
    from conftest import rows

    twice = (ROOT / "fuzz/regressions/otlpjson_diff/service-name-twice.json").read_bytes()
    number = (ROOT / "fuzz/regressions/otlpjson_diff/service-name-not-a-string-nested.json").read_bytes()
    for raw in (twice, number):
        targets.otlpjson_diff(raw)
    monkeypatch.setattr(otlp_fast, "AVAILABLE", False)
    nested = export([span(trace_id(), span_id(), "n", T0, T0 + MS, attributes={"m": {"k": 1}})])
    nested["resourceSpans"][0]["resource"]["attributes"] += attrs({"service.name": "second"})
    import json

    rep = ingest_text(archive_path, number + b"\n" + json.dumps(nested).encode() + b"\n")
    assert rep.rejected == []
    assert rows(archive_path, "SELECT name, service_name FROM spans ORDER BY name") == [("n", "engine"), ("op", None)]


def test_a_protobuf_export_takes_the_first_string_service_name_as_json_does():
    """The protobuf reference decoder took the last of two service.name attributes, and a number as the service:
    the same export sent as protobuf and as JSON stored different services."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    from budgetscope.ingest import otlp_proto

    def export_with(*values):
        msg = ExportTraceServiceRequest()
        rs = msg.resource_spans.add()
        rs.resource.attributes.extend(KeyValue(key="service.name", value=v) for v in values)
        s = rs.scope_spans.add().spans.add()
        s.trace_id, s.span_id, s.name = bytes(range(1, 17)), bytes(range(1, 9)), "op"
        s.start_time_unix_nano, s.end_time_unix_nano = T0, T0 + MS
        return msg.SerializeToString()

    def service(payload):
        return otlp_proto.decode(payload).to_arrow(1).column("service_name")[0].as_py()

    assert service(export_with(AnyValue(string_value="first"), AnyValue(string_value="second"))) == "first"
    assert service(export_with(AnyValue(int_value=3), AnyValue(string_value="second"))) is None


def test_an_attribute_without_a_key_is_dropped_on_every_path():
    """The reference decoder failed the batch with a KeyError where the DuckDB path dropped the attribute: the
    same bytes were stored or rejected depending on the path that read them."""
    import json

    from budgetscope.ingest import otlp_json

    raw = (ROOT / "fuzz/regressions/otlpjson_diff/attribute-without-key.json").read_bytes()
    targets.otlpjson_diff(raw)
    doc = export([span(trace_id(), span_id(), "op", T0, T0 + MS, attributes={"a": 1})])
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"].append({"value": {"intValue": "2"}})
    batch = otlp_json.decode(json.loads(json.dumps(doc)))
    assert json.loads(batch.to_arrow(1).column("attributes")[0].as_py()) == {"a": 1}
