"""AIPerf `profile_export.jsonl` (one `{metadata, metrics, error}` record a line) as client data."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import rows

from budgetscope.cli import main

T0 = 1_800_000_000_000_000_000


def _record(i, *, phase="profiling", error=None, cancelled=False):
    start = T0 + i * 100_000_000
    return {"metadata": {"session_num": i, "x_request_id": f"req-{i}", "request_start_ns": start,
                         "request_ack_ns": start + 1_000_000, "request_end_ns": start + 80_000_000,
                         "worker_id": "worker-0", "benchmark_phase": phase, "was_cancelled": cancelled},
            "metrics": {"time_to_first_token": {"value": 20.0 + i, "unit": "ms"},
                        "request_latency": {"value": 80.0, "unit": "ms"},
                        "inter_token_latency": {"value": 6.0, "unit": "ms"},
                        "input_sequence_length": {"value": 128, "unit": "tokens"},
                        "output_sequence_length": {"value": 11, "unit": "tokens"}},
            "error": error}


def test_aiperf_records_become_client_rows(tmp_path, archive_path):
    f = tmp_path / "profile_export.jsonl"
    recs = [_record(0, phase="warmup"), _record(1), _record(2), _record(3, error={"type": "server_error",
                                                                                  "message": "boom"})]
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    r = CliRunner().invoke(main, ["import", "--format", "aiperf", str(f), "-a", str(archive_path)])
    assert r.exit_code == 0, r.output
    got = rows(archive_path, """SELECT source, outcome, client_sent_ns, client_ttft_ms, client_e2e_ms, input_tokens,
        output_tokens, unaccounted_ms FROM requests ORDER BY client_sent_ns""")
    assert got == [("client", "ok", T0 + 100_000_000, pytest.approx(21), pytest.approx(80), 128, 11, pytest.approx(80)),
                   ("client", "ok", T0 + 200_000_000, pytest.approx(22), pytest.approx(80), 128, 11, pytest.approx(80)),
                   ("client", "error", T0 + 300_000_000, pytest.approx(23), pytest.approx(80), 128, 11, pytest.approx(80))]
    assert rows(archive_path, "SELECT DISTINCT attributes->>'aiperf.x_request_id' FROM spans ORDER BY 1") == [
        ("req-1",), ("req-2",), ("req-3",)]


def test_bad_aiperf_line_lands_nothing(tmp_path, archive_path):
    f = tmp_path / "profile_export.jsonl"
    f.write_text(json.dumps(_record(1)) + "\n{ not json\n")
    r = CliRunner().invoke(main, ["import", "--format", "aiperf", str(f), "-a", str(archive_path)])
    assert r.exit_code == 2 and r.stderr.startswith(f"budgetscope: {f}: line 2: not JSON")
    assert rows(archive_path, "SELECT count(*) FROM spans") == [(0,)]
