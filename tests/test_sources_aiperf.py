"""AIPerf `profile_export.jsonl` (one `{metadata, metrics, error}` record a line) as client data.

Wire format: `MetricRecordInfo` / `MetricRecordMetadata` / `MetricValue` (aiperf/common/models/record_models.py),
`ErrorDetails` (aiperf/common/models/error_models.py) and the metric tags of aiperf/metrics/types/; ai-dynamo/aiperf
at db4f6397d11ee2d4cfbb41f70b2327315163dcf0.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from conftest import rows

T0 = 1_800_000_000_000_000_000


def _record(i, *, phase="profiling", error=None, cancelled=False):
    start = T0 + i * 100_000_000
    return {
        "metadata": {
            "session_num": i,
            "x_request_id": f"req-{i}",
            "request_start_ns": start,
            "request_ack_ns": start + 1_000_000,
            "request_end_ns": start + 80_000_000,
            "worker_id": "worker-0",
            "benchmark_phase": phase,
            "was_cancelled": cancelled,
        },
        "metrics": {
            "time_to_first_token": {"value": 20.0 + i, "unit": "ms"},
            "request_latency": {"value": 80.0, "unit": "ms"},
            "inter_token_latency": {"value": 6.0, "unit": "ms"},
            "input_sequence_length": {"value": 128, "unit": "tokens"},
            "output_sequence_length": {"value": 11, "unit": "tokens"},
        },
        "error": error,
    }


def test_aiperf_records_become_client_rows(tmp_path, archive_path):
    f = tmp_path / "profile_export.jsonl"
    recs = [
        _record(0, phase="warmup"),
        _record(1),
        _record(2),
        _record(3, error={"type": "server_error", "message": "boom"}),
    ]
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    r = CliRunner().invoke(main, ["import", "--format", "aiperf", str(f), "-a", str(archive_path)])
    assert r.exit_code == 0, r.output
    got = rows(
        archive_path,
        """SELECT source, outcome, client_sent_ns, client_ttft_ms, client_e2e_ms, input_tokens,
        output_tokens, unaccounted_ms FROM requests ORDER BY client_sent_ns""",
    )
    assert got == [
        ("client", "ok", T0 + 100_000_000, pytest.approx(21), pytest.approx(80), 128, 11, pytest.approx(80)),
        ("client", "ok", T0 + 200_000_000, pytest.approx(22), pytest.approx(80), 128, 11, pytest.approx(80)),
        ("client", "error", T0 + 300_000_000, pytest.approx(23), pytest.approx(80), 128, 11, pytest.approx(80)),
    ]
    assert rows(archive_path, "SELECT DISTINCT attributes->>'aiperf.x_request_id' FROM spans ORDER BY 1") == [
        ("req-1",),
        ("req-2",),
        ("req-3",),
    ]


def test_aiperf_cancelled_and_failed_records_keep_their_code_and_prompt_length(tmp_path, archive_path):
    start = T0 + 500_000_000
    cancelled = {
        "metadata": {
            "session_num": 5,
            "x_request_id": "req-5",
            "x_correlation_id": "c-5",
            "conversation_id": "conv-5",
            "turn_index": 0,
            "request_start_ns": start,
            "request_ack_ns": None,
            "request_end_ns": start + 700_000,
            "worker_id": "worker-0",
            "record_processor_id": "record_processor_0",
            "benchmark_phase": "profiling",
            "was_cancelled": True,
            "cancellation_time_ns": start + 700_000,
        },
        "metrics": {"error_isl": {"value": 550, "unit": "tokens"}},
        "error": {
            "code": 499,
            "type": "RequestCancellationError",
            "message": "Request was cancelled after 0.000 seconds",
        },
    }
    failed = _record(6, error={"code": 500, "type": "HTTPError", "message": "Internal Server Error"})
    f = tmp_path / "profile_export.jsonl"
    f.write_text(json.dumps(cancelled) + "\n" + json.dumps(failed) + "\n")
    r = CliRunner().invoke(main, ["import", "--format", "aiperf", str(f), "-a", str(archive_path)])
    assert r.exit_code == 0, r.output
    assert rows(
        archive_path,
        """SELECT outcome, http_status, input_tokens, client_ttft_ms, client_e2e_ms FROM requests
        ORDER BY client_sent_ns""",
    ) == [("cancelled", 499, 550, None, pytest.approx(0.7)), ("error", 500, 128, pytest.approx(26), pytest.approx(80))]


def test_bad_aiperf_line_lands_nothing(tmp_path, archive_path):
    f = tmp_path / "profile_export.jsonl"
    f.write_text(json.dumps(_record(1)) + "\n{ not json\n")
    r = CliRunner().invoke(main, ["import", "--format", "aiperf", str(f), "-a", str(archive_path)])
    assert r.exit_code == 2 and r.stderr.startswith(f"budgetscope: {f}: line 2: not JSON")
    assert not archive_path.exists()  # nothing landed: the archive the import would have created is not left behind


def test_aiperf_mapping_takes_usage_counts_and_keeps_chunk_and_token_gaps_apart(tmp_path, archive_path):
    rec = _record(1)
    rec["metrics"].update(
        {
            "usage_prompt_tokens": {"value": 129, "unit": "tokens"},
            "usage_completion_tokens": {"value": 64, "unit": "tokens"},
            "usage_prompt_cache_read_tokens": {"value": 32, "unit": "tokens"},
            "output_sequence_length": {"value": 54, "unit": "tokens"},  # AIPerf's own tokenizer's count
            "inter_chunk_latency": {"value": [12.0, 3.5, 20.0], "unit": "ms"},
            "inter_token_latency": {"value": 0.95, "unit": "ms"},
        }
    )
    run = tmp_path / "artifacts"
    run.mkdir()
    (run / "profile_export_aiperf.json").write_text(
        json.dumps({"input_config": {"models": {"items": [{"name": "llama-3-8b"}]}}})
    )
    f = run / "profile_export.jsonl"
    f.write_text(json.dumps(rec) + "\n")
    r = CliRunner().invoke(main, ["import", "--from", "aiperf", str(f), "-a", str(archive_path)])
    assert r.exit_code == 0, r.output
    assert rows(
        archive_path,
        """SELECT model, input_tokens, output_tokens, cached_tokens, client_itl_ms, service_name,
        client_tpot_ms FROM requests""",
    ) == [("llama-3-8b", 129, 64, 32, None, "aiperf", pytest.approx((80 - 21) / 63))]
    assert rows(
        archive_path,
        """SELECT CAST(attributes->'aiperf.inter_chunk_latency_ms' AS DOUBLE[]),
        CAST(attributes->>'aiperf.inter_token_latency_ms' AS DOUBLE),
        attributes->>'budgetscope.client.first_token_definition' FROM spans""",
    ) == [([12.0, 3.5, 20.0], 0.95, "first_nonempty_chunk")]
