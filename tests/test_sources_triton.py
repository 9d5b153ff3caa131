"""Triton: trace files (`--trace-config triton,file=…`, level TIMESTAMPS) and OpenTelemetry mode → server rows.

Wire format of docs/user_guide/trace.md and src/tracer.cc (triton-inference-server/server at
e1db8a603d863b1317ee859bdeea2be19959462e): a JSON array of objects keyed by `id`, timestamps `{name, ns}` on a
steady clock; in OpenTelemetry mode a top-level span, a model span and a `compute` span, all SERVER kind, the
timestamps their events (the mapping: budgetscope/derive/triton.py; the cases: tests/conformance/triton/).
"""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from budgetscope.sources.importers import KIND_CLIENT, KIND_SERVER, document, span
from conftest import rows

US = 1_000
STEADY0 = 2_356_425_054_587_444
NAMES = (
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
)
OFFSETS_US = (0, 45, 198, 204, 1300, 1400, 4200, 4300, 4400, 4450, 4480)


def _trace_file(tmp_path, n=2):
    recs = []
    for i in range(1, n + 1):
        recs.append({"id": i, "model_name": "llama", "model_version": 1, "request_id": f"r{i}"})
        base = STEADY0 + i * 10_000 * US
        recs += [
            {"id": i, "timestamps": [{"name": name, "ns": base + off * US}]} for name, off in zip(NAMES, OFFSETS_US)
        ]
    f = tmp_path / "trace.json"
    f.write_text(json.dumps(recs, indent=1))
    return f


def test_trace_file_import_maps_timestamps_to_stages(tmp_path, archive_path):
    f = _trace_file(tmp_path)
    end_at = 1_800_000_000_000_000_000
    os.utime(f, ns=(end_at, end_at))
    r = CliRunner().invoke(main, ["import", "--format", "triton", str(f), "-a", str(archive_path)])
    assert r.exit_code == 0, r.output
    got = rows(
        archive_path,
        """SELECT source, model, request_id, frontend_ms, queue_ms, prefill_ms, decode_ms,
        postprocess_ms, ttft_ms, e2e_ms, unaccounted_ms, end_ns FROM requests ORDER BY arrival_ns""",
    )
    assert len(got) == 2
    for g in got:
        assert g[:3] == ("triton", "llama", g[2]) and g[2] in ("r1", "r2")
        assert g[3:5] == pytest.approx((0.204, 1.096))
        assert g[5:7] == (None, None) and g[8] is None  # Triton sees a model execution, not tokens
        # no response stamped (INFER_RESPONSE_COMPLETE): the last token is unknown, and so is postprocess; COMPUTE_END
        # and REQUEST_END are not read as it (a decoupled model's come before its first token)
        assert g[7] is None and g[9] == pytest.approx(4.48)
        assert g[10] == pytest.approx(3.18)  # compute and after: unsplit
    assert got[-1][11] == end_at  # anchored at the file's modification time


def test_trace_file_clock_offset_and_idempotence(tmp_path, archive_path):
    f = _trace_file(tmp_path, n=1)
    args = ["import", "--format", "triton", str(f), "-a", str(archive_path), "--clock-offset-ns", "1000"]
    assert CliRunner().invoke(main, args).exit_code == 0
    assert "1 already imported" in CliRunner().invoke(main, args).output
    assert rows(archive_path, "SELECT arrival_ns FROM requests") == [(STEADY0 + 10_000 * US + 1000,)]


def test_bad_trace_file_names_the_record(tmp_path, archive_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps([{"id": 1, "timestamps": [{"name": "QUEUE_START"}]}]))
    r = CliRunner().invoke(main, ["import", "--format", "triton", str(f), "-a", str(archive_path)])
    assert r.exit_code == 2
    assert r.stderr == f"budgetscope: {f}: record 0 timestamp 0: want {{name, ns}} (nothing from it landed)\n"


def _events(s: dict, *events: tuple[str, int]) -> dict:
    """The span `s` with Triton's stamps as its events (src/tracer.cc `AddEvent`)."""
    s["events"] = [{"timeUnixNano": str(t), "name": n} for n, t in events]
    return s


def _otel_request(tid, k, t0, parent, queue_ms, responses_ms, end_ms, model_attrs=None):
    """One OpenTelemetry-mode request `k`, times in ms after `t0`: InferRequest, the model span, `compute`."""
    ms = 1_000_000
    top, model, c = (f"{k:012x}00e{x}" for x in (1, 2, 3))
    attrs = {"triton.model_name": "llama", "triton.request_id": f"r{k}", **(model_attrs or {})}
    at = [t0 + int(x * ms) for x in responses_ms]
    return [
        _events(
            span(tid, top, "InferRequest", KIND_SERVER, t0, t0 + end_ms * ms, {}, parent_span_id=parent),
            ("HTTP_RECV_START", t0 - ms // 10),
            *(("INFER_RESPONSE_COMPLETE", t) for t in at),
            *(x for _ in at for x in (("HTTP_SEND_START", 0), ("HTTP_SEND_END", 0))),
        ),
        _events(
            span(tid, model, "llama", KIND_SERVER, t0 + ms, t0 + 2 * ms, attrs, parent_span_id=top),
            ("REQUEST_START", t0 + ms),
            ("QUEUE_START", t0 + ms),
            ("REQUEST_END", t0 + 2 * ms),
        ),
        _events(
            span(tid, c, "compute", KIND_SERVER, t0 + (1 + queue_ms) * ms, t0 + (1.5 + queue_ms) * ms, {}, model),
            ("COMPUTE_START", t0 + (1 + queue_ms) * ms),
        ),
    ]


def test_opentelemetry_mode_reads_the_events_not_the_span_bounds(archive_path, ingest_text):
    """A decoupled model whose request is released right after `execute()` (REQUEST_END at 2 ms): its stages come from
    the responses (first at 20 ms, last at 48 ms), never from the model span's end; zero-time sends are dropped."""
    t0, ms = 1_800_000_000_000_000_000, 1_000_000
    tid, csid = f"{9:032x}", f"{9:016x}"
    triton = _otel_request(tid, 0, t0, csid, 8, (20, 30, 48), 50, {"triton.model_version": 1})
    c = span(tid, csid, "llm.client.request", KIND_CLIENT, t0 - 2 * ms, t0 + 53 * ms, {})
    ingest_text(
        archive_path,
        document("triton-inference-server", triton, scope="triton-server").decode()
        + "\n"
        + document("loadgen", [c]).decode(),
    )
    got = rows(
        archive_path,
        """SELECT source, model, frontend_ms, queue_ms, prefill_ms, decode_ms, postprocess_ms, ttft_ms, e2e_ms,
        unaccounted_ms, network_ms FROM requests""",
    )
    assert got == [("triton", "llama", 1.1, 8.0, None, 28.0, 2.0, 20.1, 50.1, 11.0, pytest.approx(4.9))]


def test_without_its_events_a_triton_request_is_e2e_only(archive_path, ingest_text):
    """Spans whose events were dropped on the way (a Collector processor): no stage is read off the span bounds;
    the E2E is the `InferRequest` span's, everything else unknown."""
    t0, ms = 1_800_000_000_000_000_000, 1_000_000
    spans = _otel_request(f"{11:032x}", 0, t0, None, 8, (20,), 50)
    for s in spans:
        s.pop("events")
    ingest_text(archive_path, document("my-inference", spans, scope="triton-server").decode())
    assert rows(archive_path, "SELECT frontend_ms, queue_ms, postprocess_ms, ttft_ms, e2e_ms FROM requests") == [
        (None, None, None, None, 50.0)
    ]


def test_trace_file_of_unset_timestamps_lands_nothing(tmp_path, archive_path):
    """Triton logs a send time it did not capture as 0 (chunked HTTP replies): such a timestamp is dropped, and a
    file with nothing else is refused whole."""
    f = tmp_path / "t.json"
    f.write_text(
        json.dumps(
            [
                {"id": 1, "model_name": "m", "model_version": 1},
                {"id": 1, "timestamps": [{"name": "HTTP_SEND_START", "ns": 0}]},
                {"id": 1, "timestamps": [{"name": "HTTP_SEND_END", "ns": 0}]},
            ]
        )
    )
    r = CliRunner().invoke(main, ["import", "--format", "triton", str(f), "-a", str(archive_path)])
    assert r.exit_code == 2
    assert r.stderr == f"budgetscope: {f}: no timestamps (nothing from it landed)\n"
    assert not archive_path.exists() or rows(archive_path, "SELECT count(*) FROM spans") == [(0,)]


def test_opentelemetry_requests_sharing_a_trace_keep_their_own_compute(archive_path, ingest_text):
    """An application span calling Triton twice (one traceparent): each request's stages come from its own
    model and `compute` spans, not from the trace's."""
    t0, ms, tid, app = 1_800_000_000_000_000_000, 1_000_000, f"{10:032x}", f"{10:016x}"
    spans = _otel_request(tid, 0, t0, app, 8, (40,), 100) + _otel_request(tid, 1, t0 + 20 * ms, app, 39, (60,), 100)
    ingest_text(
        archive_path,
        document("app", [span(tid, app, "agent.run", KIND_SERVER, t0, t0 + 200 * ms, {})]).decode()
        + "\n"
        + document("triton-inference-server", spans, scope="triton-server").decode(),
    )
    assert rows(archive_path, "SELECT request_id, frontend_ms, queue_ms, postprocess_ms FROM requests ORDER BY 1") == [
        ("r0", 1.1, 8.0, 60.0),
        ("r1", 1.1, 39.0, 40.0),
    ]


def test_triton_is_known_by_its_tracer_not_its_service_name(archive_path, ingest_text):
    """`--trace-config opentelemetry,resource=service.name=edge-7`: still Triton's (tracer `triton-server`); a web
    app's span in a service that happens to be called `triton-gateway` is not."""
    t0, ms = 1_800_000_000_000_000_000, 1_000_000
    spans = _otel_request(f"{12:032x}", 0, t0, None, 8, (20, 30), 50)
    web = span(f"{13:032x}", f"{13:016x}", "GET /health", KIND_SERVER, t0, t0 + ms, {})
    ingest_text(
        archive_path,
        document("edge-7", spans, scope="triton-server").decode()
        + "\n"
        + document("triton-gateway", [web], scope="fastapi").decode(),
    )
    assert rows(archive_path, "SELECT service_name, source, decode_ms FROM requests") == [("edge-7", "triton", 10.0)]
    assert rows(archive_path, "SELECT source FROM spans WHERE name = 'GET /health'") == [("other",)]
