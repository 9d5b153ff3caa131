"""Triton: trace files (`--trace-config triton,file=…`, level TIMESTAMPS) and OpenTelemetry mode → server rows.

Wire format of docs/user_guide/trace.md and src/tracer.cc (triton-inference-server/server at
e1db8a603d863b1317ee859bdeea2be19959462e): a JSON array of objects keyed by `id`, timestamps `{name, ns}` on a
steady clock; in OpenTelemetry mode a top-level span, a model span and a `compute` span, all SERVER kind.
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
        assert g[7] == pytest.approx(0.18) and g[9] == pytest.approx(4.48)
        assert g[10] == pytest.approx(3.0)  # compute: prefill and decode together, unsplit
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


def test_opentelemetry_mode_spans(archive_path, ingest_text):
    t0, ms = 1_800_000_000_000_000_000, 1_000_000
    tid, csid, top, model = f"{9:032x}", f"{9:016x}", "00000000000000e1", "00000000000000e2"
    # src/tracer.cc: every span SERVER kind; the model span named after the model, with `triton.*` attributes
    model_attrs = {
        "triton.model_name": "llama",
        "triton.model_version": 1,
        "triton.trace_id": 1,
        "triton.trace_parent_id": 0,
    }
    triton = [
        span(tid, top, "InferRequest", KIND_SERVER, t0, t0 + 50 * ms, {}, parent_span_id=csid),
        span(tid, model, "llama", KIND_SERVER, t0 + 1 * ms, t0 + 48 * ms, model_attrs, parent_span_id=top),
        span(tid, "00000000000000e3", "compute", KIND_SERVER, t0 + 9 * ms, t0 + 45 * ms, {}, parent_span_id=model),
    ]
    c = span(tid, csid, "llm.client.request", KIND_CLIENT, t0 - 2 * ms, t0 + 53 * ms, {})
    ingest_text(
        archive_path, document("triton-inference-server", triton).decode() + "\n" + document("loadgen", [c]).decode()
    )
    assert rows(
        archive_path,
        """SELECT source, model, frontend_ms, queue_ms, postprocess_ms, e2e_ms, unaccounted_ms,
        network_ms FROM requests""",
    ) == [("triton", "llama", 1.0, 8.0, 2.0, 50.0, 39.0, 5.0)]  # done = REQUEST_END


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
    spans = []
    for k, (start, compute) in enumerate(((0, (9, 45)), (20, (40, 80)))):
        top, model, c = (f"{k:012x}00e{x}" for x in (1, 2, 3))
        spans += [
            span(
                tid, top, "InferRequest", KIND_SERVER, t0 + start * ms, t0 + (start + 100) * ms, {}, parent_span_id=app
            ),
            span(
                tid,
                model,
                "llama",
                KIND_SERVER,
                t0 + (start + 1) * ms,
                t0 + (start + 98) * ms,
                {"triton.model_name": "llama", "triton.request_id": f"r{k}"},
                parent_span_id=top,
            ),
            span(
                tid,
                c,
                "compute",
                KIND_SERVER,
                t0 + (start + compute[0]) * ms,
                t0 + (start + compute[1]) * ms,
                {},
                parent_span_id=model,
            ),
        ]
    ingest_text(
        archive_path,
        document("app", [span(tid, app, "agent.run", KIND_SERVER, t0, t0 + 200 * ms, {})]).decode()
        + "\n"
        + document("triton-inference-server", spans).decode(),
    )
    assert rows(archive_path, "SELECT request_id, frontend_ms, queue_ms, postprocess_ms FROM requests ORDER BY 1") == [
        ("r0", 1.0, 8.0, 2.0),
        ("r1", 1.0, 39.0, 2.0),
    ]
