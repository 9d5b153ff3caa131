"""vLLM offline `RequestOutput.metrics`, one JSON object a line as the vLLM kit's snippet writes it.

`metrics` is `dataclasses.asdict` of V1 `RequestStateStats` (vllm/v1/metrics/stats.py at
28ed1fb87ed5686e1d4d0cf4134b8e05d8a25a8a: fields in declaration order) or V0 `RequestMetrics` (vllm/sequence.py at
3e061107fac6ea02f8bab0253ee0541174423a9b).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from conftest import rows

T = 1_790_000_000.25  # arrival, wall clock (s)
MONO = 5000.0  # engine-core monotonic clock (s)
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _v1(**over) -> dict:
    """V1 `RequestStateStats` as `dataclasses.asdict` gives it."""
    stats = {
        "num_generation_tokens": 21,
        "arrival_time": T,
        "queued_ts": MONO + 0.010,
        "scheduled_ts": MONO + 0.040,
        "first_token_ts": MONO + 0.075,
        "last_token_ts": MONO + 0.275,
        "first_token_latency": 0.080,
        "is_corrupted": False,
    }
    return stats | over


def _v0(**over) -> dict:
    """V0 `RequestMetrics` as `dataclasses.asdict` gives it."""
    return {
        "arrival_time": T + 1,
        "last_token_time": T + 1.5,
        "first_scheduled_time": T + 1.1,
        "first_token_time": T + 1.2,
        "time_in_queue": 0.1,
        "finished_time": T + 1.51,
        "scheduler_time": 0.002,
        "model_forward_time": None,
        "model_execute_time": None,
    } | over


def _line(request_id: str, metrics: dict | None, *, output_tokens: int = 21, finish: str = "length") -> str:
    return json.dumps(
        {
            "request_id": request_id,
            "model": MODEL,
            "prompt_tokens": 200,
            "output_tokens": output_tokens,
            "cached_tokens": 128,
            "finish_reason": finish,
            "metrics": metrics,
        }
    )


def _import(path, archive):
    return CliRunner().invoke(main, ["import", "--format", "vllm-metrics", str(path), "-a", str(archive)])


COLS = """source, request_id, service_name, model, outcome, arrival_ns, first_token_ns, end_ns, input_tokens,
    cached_tokens, output_tokens, frontend_ms, queue_ms, prefill_ms, decode_ms, postprocess_ms, ttft_ms, e2e_ms,
    tpot_ms, ttft_unaccounted_ms, unaccounted_ms, network_ms, has_client_span"""


def test_v1_request_state_stats_map_to_stages(tmp_path, archive_path):
    f = tmp_path / "vllm-metrics.jsonl"
    f.write_text(_line("0", _v1()) + "\n")
    r = _import(f, archive_path)
    assert r.exit_code == 0, r.output
    (got,) = rows(archive_path, f"SELECT {COLS} FROM requests")
    arrival = int(round(T * 1e9))
    assert got[:5] == ("vllm", "0", "vllm-offline", MODEL, "ok")
    assert got[5] == arrival and got[6] == pytest.approx(arrival + 80_000_000, abs=1000)
    assert got[7] == pytest.approx(arrival + 280_000_000, abs=1000)  # the last token: V1 keeps no finish time
    assert got[8:11] == (200, 128, 21)
    # frontend = TTFT − queue − prefill; queue, prefill, decode from the engine-core timestamps
    assert got[11:15] == pytest.approx((15.0, 30.0, 35.0, 200.0), abs=1e-6)
    assert got[15] is None and got[16] == pytest.approx(80.0) and got[17] is None  # E2E, postprocess unknown
    assert got[18] == pytest.approx(10.0) and got[19] == pytest.approx(0.0, abs=1e-6)
    assert got[20:] == (None, None, False)


def test_v0_request_metrics_map_to_stages(tmp_path, archive_path):
    f = tmp_path / "vllm-metrics.jsonl"
    f.write_text(_line("1", _v0(), output_tokens=31) + "\n")
    assert _import(f, archive_path).exit_code == 0
    (got,) = rows(archive_path, f"SELECT {COLS} FROM requests")
    assert got[7] == int(round((T + 1.51) * 1e9))
    assert got[11:19] == pytest.approx((0.0, 100.0, 100.0, 300.0, 10.0, 200.0, 510.0, 10.0), abs=1e-3)
    assert got[19:21] == pytest.approx((0.0, 0.0), abs=1e-3)


def test_aborted_and_unscheduled_requests_leave_unknown_stages_null(tmp_path, archive_path):
    f = tmp_path / "vllm-metrics.jsonl"
    never = _v1(
        num_generation_tokens=0, scheduled_ts=0.0, first_token_ts=0.0, last_token_ts=0.0, first_token_latency=0.0
    )
    f.write_text(_line("2", never, output_tokens=0, finish="abort") + "\n\n" + _line("3", _v1()) + "\n")
    assert _import(f, archive_path).exit_code == 0
    got = rows(
        archive_path,
        "SELECT request_id, outcome, queue_ms, prefill_ms, decode_ms, ttft_ms, first_token_ns, "
        "end_ns - arrival_ns FROM requests ORDER BY request_id",
    )
    assert got[0] == ("2", "error", None, None, None, None, None, 0)
    assert got[1][:2] == ("3", "ok")
    again = _import(f, archive_path)
    assert again.exit_code == 0 and "1 already imported" in again.output


@pytest.mark.parametrize(
    "content, message",
    [
        (_line("0", _v1()) + "\n{ not json\n", "{f}: line 2: not JSON"),
        (_line("0", None) + "\n", "{f}: line 1: `metrics` is null: build the LLM with disable_log_stats=False"),
        (
            _line("0", {"arrival_time": T, "spec_decoding": 1}) + "\n",
            "{f}: line 1: metrics has neither vLLM V1 (`queued_ts`, `scheduled_ts`, …) nor V0 (`first_scheduled_time`, "
            "`finished_time`, …) fields",
        ),
        (
            _line("0", _v1(scheduled_ts="later")) + "\n",
            '{f}: line 1 metrics.scheduled_ts: expected a number, got "later"',
        ),
        ('{"request_id": "0"}\n', "{f}: line 1: not a vLLM request record (want an object with `metrics`)"),
        ("\n", "{f}: no vLLM request records"),
    ],
)
def test_bad_vllm_metrics_file_is_one_line_and_lands_nothing(tmp_path, archive_path, content, message):
    good = tmp_path / "good.jsonl"
    good.write_text(_line("9", _v1()) + "\n")
    assert _import(good, archive_path).exit_code == 0
    count = (
        "SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM requests), (SELECT count(*) FROM ingest_batches)"
    )
    before = rows(archive_path, count)
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    r = _import(f, archive_path)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.startswith("budgetscope: " + message.format(f=f)) and r.stderr.count("\n") == 1
    assert r.stderr.endswith(" (nothing from it landed)\n")
    assert rows(archive_path, count) == before
