"""vLLM: `/metrics` scraped into `server_metrics`, and `vllm bench serve --save-detailed` results as client data.

Wire formats: Prometheus names of vllm/v1/metrics/loggers.py (PrometheusStatLogger) and the result keys of
vllm/benchmarks/serve.py (`input_lens`, `output_lens`, `ttfts`, `itls`, `start_times`, `errors`, `date`);
vllm-project/vllm at 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1. The `llm_request` span is in test_adapters.py.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from conftest import rows

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B"} 7.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B"} 0.42
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B"} 0.42
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="meta-llama/Llama-3.1-8B"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B"} 12.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B"} 12.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B"} 0.9
vllm:request_queue_time_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B"} 0.25
vllm:request_prefill_time_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B"} 0.5
vllm:request_decode_time_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B"} 4.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B"} 300.0
"""


class _Metrics(BaseHTTPRequestHandler):
    body = METRICS

    def do_GET(self):
        data = self.body.encode()
        self.send_response(200)
        self.send_header("content-type", "text/plain; version=0.0.4")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def metrics_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/metrics"
    server.shutdown()


def test_scrape_lands_every_series_under_vllm_names(metrics_url, archive_path):
    r = CliRunner().invoke(main, ["scrape", metrics_url, "-a", str(archive_path), "--every", "50ms", "--count", "3"])
    assert r.exit_code == 0, r.output
    assert "3 scrapes of 1 URL(s), 36 samples, 0 failed" in r.output
    got = dict(rows(archive_path, "SELECT metric, max(value) FROM server_metrics GROUP BY 1"))
    assert got["vllm:num_requests_waiting"] == 3 and got["vllm:kv_cache_usage_perc"] == 0.42
    assert got["vllm:gpu_cache_usage_perc"] == 0.42 and got["vllm:request_decode_time_seconds_sum"] == 4
    (labels,) = rows(
        archive_path,
        "SELECT DISTINCT labels->>'le' FROM server_metrics WHERE metric = "
        "'vllm:time_to_first_token_seconds_bucket' AND (labels->>'le') = '+Inf'",
    )
    assert labels == ("+Inf",)
    assert rows(archive_path, "SELECT count(*), count(DISTINCT batch_id) FROM server_metrics") == [(36, 3)]
    assert rows(
        archive_path,
        "SELECT DISTINCT format, service_name FROM ingest_batches, server_metrics "
        "WHERE ingest_batches.batch_id = server_metrics.batch_id",
    ) == [("prometheus-text", metrics_url.split("/")[2])]


def test_scrape_failures_are_one_line_each(archive_path):
    r = CliRunner().invoke(main, ["scrape", "http://127.0.0.1:9/metrics", "-a", str(archive_path), "--count", "1"])
    assert r.exit_code == 2 and "scrape failed" in r.stderr and "Traceback" not in r.output


def test_imported_metrics_file_is_atomic_and_lands_once(tmp_path, archive_path):
    good = tmp_path / "metrics.txt"
    good.write_text(METRICS)
    args = ["import", "--format", "prometheus", str(good), "-a", str(archive_path), "--start", "2026-01-01T00:00:00Z"]
    assert CliRunner().invoke(main, args).exit_code == 0
    assert CliRunner().invoke(main, args).output.endswith("0 samples (already imported, or empty)\n")
    assert rows(archive_path, "SELECT count(*), min(ts_ns) FROM server_metrics") == [(12, 1767225600000000000)]
    bad = tmp_path / "bad.txt"
    bad.write_text(METRICS + 'vllm:oops{model_name="m" 1\n')
    r = CliRunner().invoke(main, ["import", "--format", "prometheus", str(bad), "-a", str(archive_path)])
    assert r.exit_code == 2
    n = len(METRICS.splitlines()) + 1
    assert (
        r.stderr == f"budgetscope: {bad}: line {n}: not a Prometheus sample: 'vllm:oops{{model_name=\"m\" 1'"
        " (expected , or } after a label) (nothing from it landed)\n"
    )
    assert rows(archive_path, "SELECT count(*) FROM server_metrics") == [(12,)]


def _bench_result() -> dict:
    return {
        "date": "20260101-120000",
        "backend": "vllm",
        "model_id": "meta-llama/Llama-3.1-8B",
        "num_prompts": 3,
        "completed": 2,
        "input_lens": [100, 200, 300],
        "output_lens": [4, 3, 0],
        "ttfts": [0.05, 0.08, 0.0],
        "itls": [[0.01, 0.012, 0.011], [0.02, 0.021], []],
        "start_times": [1000.0, 1000.5, 1001.25],
        "generated_texts": ["a", "b", ""],
        "errors": ["", "", "Bad Request"],
    }


def test_vllm_bench_detailed_result_becomes_client_rows(tmp_path, archive_path):
    f = tmp_path / "vllm-result.json"
    f.write_text(json.dumps(_bench_result(), indent=2))
    r = CliRunner().invoke(main, ["import", "--format", "vllm-bench", str(f), "-a", str(archive_path)])
    assert r.exit_code == 0, r.output
    got = rows(
        archive_path,
        """SELECT source, outcome, model, client_sent_ns, client_ttft_ms, client_e2e_ms,
        client_itl_ms, input_tokens, output_tokens, ttft_ms, network_ms, unaccounted_ms FROM requests
        ORDER BY client_sent_ns""",
    )
    t0 = 1767268800 * 10**9  # 2026-01-01 12:00:00 as UTC
    assert [g[:4] for g in got] == [
        ("client", "ok", "meta-llama/Llama-3.1-8B", t0),
        ("client", "ok", "meta-llama/Llama-3.1-8B", t0 + 500_000_000),
        ("client", "error", "meta-llama/Llama-3.1-8B", t0 + 1_250_000_000),
    ]
    assert got[0][4:9] == (pytest.approx(50), pytest.approx(83), pytest.approx([10, 12, 11]), 100, 4)
    assert got[0][9:] == (None, None, pytest.approx(83))
    assert (
        CliRunner()
        .invoke(main, ["import", "--format", "vllm-bench", str(f), "-a", str(archive_path)])
        .output.count("1 already imported")
        == 1
    )
    assert rows(archive_path, "SELECT count(*) FROM requests") == [(3,)]


def test_vllm_bench_bad_input_names_the_file_and_where(tmp_path, archive_path):
    f = tmp_path / "r.json"
    f.write_text('{"date": "20260101-120000",\n "ttfts": [0.1,\n oops]}')
    r = CliRunner().invoke(main, ["import", "--format", "vllm-bench", str(f), "-a", str(archive_path)])
    assert r.exit_code == 2 and r.stderr.startswith(f"budgetscope: {f}: line 3: not JSON")
    res = _bench_result()
    del res["itls"]
    f.write_text(json.dumps(res))
    r = CliRunner().invoke(main, ["import", "--format", "vllm-bench", str(f), "-a", str(archive_path)])
    assert r.exit_code == 2 and "no per-request itls" in r.stderr and "--save-detailed" in r.stderr
    res = _bench_result()
    res["ttfts"][1] = "fast"
    f.write_text(json.dumps(res))
    r = CliRunner().invoke(main, ["import", "--format", "vllm-bench", str(f), "-a", str(archive_path)])
    assert r.exit_code == 2 and f"{f}: request 1 ttfts: expected a number" in r.stderr
    assert not archive_path.exists()  # nothing landed: the archive the import would have created is not left behind
