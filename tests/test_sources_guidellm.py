"""GuideLLM `benchmarks.json` (a `GenerativeBenchmarksReport`) as client data.

The file is built in GuideLLM's wire format: `model_dump(mode="json")` of the models in
src/guidellm/benchmark/schemas/report.py, benchmark.py, src/guidellm/schemas/request_stats.py, info.py and
request.py (`UsageMetrics`) of vllm-project/guidellm at ee7a77457ba668b4b5ccb40f110518829893b36a: every field of
a request record, the computed fields included. The aggregate sections the importer does not read (`config` of
the report, `scheduler_state`, `scheduler_metrics`, `metrics`) are abbreviated.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from conftest import rows

T0 = 1_790_000_000.0
USAGE_FIELDS = (
    "text_tokens",
    "cached_tokens",
    "text_words",
    "text_characters",
    "image_tokens",
    "image_count",
    "image_pixels",
    "image_bytes",
    "video_tokens",
    "video_frames",
    "video_seconds",
    "video_bytes",
    "audio_tokens",
    "audio_samples",
    "audio_seconds",
    "audio_bytes",
    "tool_call_tokens",
    "mixed_content_tool_tokens",
    "tool_call_count",
)


def _usage(**given) -> dict:
    """`UsageMetrics` as dumped: every field, then the computed `total_tokens`."""
    out = {f: given.get(f) for f in USAGE_FIELDS}
    parts = [out["text_tokens"], out["image_tokens"], out["video_tokens"], out["audio_tokens"]]
    out["total_tokens"] = None if parts.count(None) == 4 else sum(p or 0 for p in parts)
    return out


def _request(
    i: int,
    t: float,
    *,
    status: str = "completed",
    first: float | None = 0.052,
    last: float | None = 0.152,
    end: float | None = 0.155,
    prompt: int = 128,
    output: int | None = 11,
    iterations: int = 11,
    error: str | None = None,
) -> dict:
    """One `GenerativeRequestStats` as dumped (times: offsets in s from `t`, the targeted start)."""
    at = lambda x: None if x is None else t + x
    timings = {
        "targeted_start": t,
        "queued": t - 0.5,
        "dequeued": t - 0.01,
        "scheduled_at": t - 0.01,
        "resolve_start": t + 0.001,
        "request_start": t + 0.002,
        "first_request_iteration": at(first),
        "first_token_iteration": at(first),
        "first_output_token_iteration": at(first),
        "last_token_iteration": at(last),
        "last_request_iteration": at(last),
        "request_iterations": iterations,
        "token_iterations": iterations,
        "request_end": at(end),
        "resolve_end": t + 0.156,
        "finalized": t + 0.157,
    }
    info = {
        "request_id": f"req-{i}",
        "conversation_id": None,
        "history_len": 0,
        "turn_index": 0,
        "node_id": None,
        "agent_id": None,
        "parent_node_ids": [],
        "status": status,
        "scheduler_node_id": 0,
        "scheduler_process_id": 0,
        "scheduler_start_time": T0 - 1,
        "timings": timings,
        "settings": {"relative_timestamp": None, "requeue_delay": None},
        "error": error,
        "traceback": None if error is None else "Traceback (most recent call last): …",
        "started_at": timings["request_start"],
        "completed_at": timings["request_end"] or timings["resolve_end"],
    }
    out_usage = _usage(
        text_tokens=output, text_words=None if output is None else 8, text_characters=None if output is None else 40
    )
    output_tokens = out_usage["total_tokens"] if out_usage["total_tokens"] is not None else (iterations or None)
    start, end_time = timings["request_start"], timings["request_end"] or timings["resolve_end"]
    latency = None if timings["request_end"] is None else timings["request_end"] - start
    rec = {
        "type_": "generative_request_stats",
        "request_id": f"req-{i}",
        "response_id": f"cmpl-{i}",
        "request_args": None,
        "output": None,
        "reasoning_output": None,
        "tool_calls": None,
        "info": info,
        "input_metrics": _usage(text_tokens=prompt, cached_tokens=64, text_words=90, text_characters=500),
        "output_metrics": out_usage,
        "request_start_time": start,
        "request_end_time": end_time,
        "request_latency": latency,
        "prompt_tokens": prompt,
        "cached_tokens": 64,
        "output_tokens": output_tokens,
        "total_tokens": prompt + (output_tokens or 0),
        "time_to_first_token_ms": None if first is None else 1000 * (timings["first_token_iteration"] - start),
        "time_per_output_token_ms": None
        if not output_tokens
        else 1000 * ((timings["last_token_iteration"] or end_time) - start) / output_tokens,
        "inter_token_latency_ms": None
        if first is None or last is None or not output_tokens or output_tokens <= 1
        else 1000 * (timings["last_token_iteration"] - timings["first_token_iteration"]) / (output_tokens - 1),
        "tokens_per_second": None,
        "output_tokens_per_second": None,
        "time_to_first_output_token_ms": None if first is None else 1000 * (first - 0.002),
        "iter_tokens_per_iteration": None,
        "output_tokens_per_iteration": None,
    }
    return rec


def _benchmark(index: int, strategy: str, successful, incomplete=(), errored=()) -> dict:
    """One `GenerativeBenchmark` as dumped (aggregates abbreviated)."""
    return {
        "type_": "generative_benchmark",
        "config": {
            "id_": f"bench-{index}",
            "run_id": "run-1",
            "run_index": index,
            "strategy": {"type_": strategy, "worker_count": 1, "max_concurrency": None},
            "constraints": {},
            "sample_size": None,
            "warmup": {},
            "cooldown": {},
            "prefer_response_metrics": True,
            "profile": {},
            "requests": {},
            "backend": {
                "kind": "openai_http",
                "target": "http://localhost:8000/v1",
                "model": "meta-llama/Llama-3.1-8B-Instruct",
            },
            "environment": {},
        },
        "scheduler_state": {},
        "scheduler_metrics": {},
        "metrics": {},
        "requests": {
            "successful": list(successful),
            "incomplete": list(incomplete),
            "errored": list(errored),
            "total": None,
        },
        "start_time": T0,
        "end_time": T0 + 10,
        "duration": 10.0,
        "warmup_duration": 0.0,
        "cooldown_duration": 0.0,
    }


def _report(version: int | None = 2) -> dict:
    meta = {"version": version, "guidellm_version": "0.7.3", "python_version": "3.12.3", "platform": "Linux"}
    return {
        "metadata": meta,
        "config": {"backend": {"kind": "openai_http"}},
        "benchmarks": [
            _benchmark(
                0,
                "constant",
                [_request(0, T0), _request(1, T0 + 1)],
                incomplete=[_request(2, T0 + 2, status="cancelled", last=0.082, end=None, output=None, iterations=4)],
                errored=[
                    _request(
                        3,
                        T0 + 3,
                        status="errored",
                        first=None,
                        last=None,
                        end=None,
                        output=None,
                        iterations=0,
                        error="HTTPStatusError(\"Server error '500 Internal Server Error'\")",
                    )
                ],
            ),
            _benchmark(1, "poisson", [_request(4, T0 + 4)]),
        ],
    }


def _import(path, archive):
    return CliRunner().invoke(main, ["import", "--format", "guidellm", str(path), "-a", str(archive)])


def test_guidellm_requests_become_client_rows(tmp_path, archive_path):
    f = tmp_path / "benchmarks.json"
    f.write_text(json.dumps(_report()))
    r = _import(f, archive_path)
    assert r.exit_code == 0, r.output
    assert r.stdout == (
        f"{f}: 5 spans (5 new), 0 already imported; 5 requests derived; "
        "0 records joined to their server spans by request id\n"
    )
    # no server spans here: a warning names the records not joined, and why
    assert r.stderr == (
        f"budgetscope: warning: {f}: 5 of 5 records not joined: 5 found no server row with their response_id "
        "(cmpl-0, cmpl-1, cmpl-2, cmpl-3, cmpl-4): client-only rows until the server's spans land, when they join\n"
    )
    got = rows(
        archive_path,
        """SELECT source, outcome, model, client_sent_ns, client_ttft_ms, client_e2e_ms,
        client_tpot_ms, schedule_lag_ms, input_tokens, cached_tokens, output_tokens, client_itl_ms, ttft_ms, e2e_ms,
        network_ms, ttft_network_ms, unaccounted_ms, ttft_unaccounted_ms, queue_ms, prefill_ms, decode_ms
        FROM requests ORDER BY client_sent_ns""",
    )
    ns = lambda s: int(round(s * 1e9))
    model = "meta-llama/Llama-3.1-8B-Instruct"
    ok0, ok1, cancelled, errored, ok4 = got
    assert ok0[:4] == ("client", "ok", model, ns(T0 + 0.002))
    assert ok0[4:8] == pytest.approx((50.0, 153.0, 103 / 10, 2.0), abs=1e-3)  # TTFT, E2E, TPOT, send lag
    assert ok0[8:12] == (128, 64, 11, None)  # GuideLLM keeps no per-token gaps
    assert ok0[12:16] == (None, None, None, None)  # no server clock: server figures and network unknown
    assert ok0[16:18] == pytest.approx((153.0, 50.0), abs=1e-3)  # the whole client figure is unaccounted
    assert ok0[18:] == (None, None, None)
    assert ok1[3] == ns(T0 + 1.002) and ok4[3] == ns(T0 + 4.002)
    assert cancelled[1] == "cancelled" and cancelled[4:6] == pytest.approx((50.0, 154.0), abs=1e-3)
    assert cancelled[10] == 4  # no usage: GuideLLM's token_iterations
    assert errored[1] == "error" and errored[4] is None and errored[5] == pytest.approx(154.0, abs=1e-3)
    assert errored[10] is None
    attrs = rows(
        archive_path,
        """SELECT attributes->>'guidellm.request_id', attributes->>'guidellm.status',
        CAST(attributes->>'guidellm.benchmark_index' AS INT), attributes->>'guidellm.strategy',
        CAST(attributes->>'guidellm.inter_token_latency_ms' AS DOUBLE), attributes->>'guidellm.error', status_code
        FROM spans ORDER BY start_ns""",
    )
    assert [a[:4] for a in attrs] == [
        ("req-0", "successful", 0, "constant"),
        ("req-1", "successful", 0, "constant"),
        ("req-2", "incomplete", 0, "constant"),
        ("req-3", "errored", 0, "constant"),
        ("req-4", "successful", 1, "poisson"),
    ]
    assert attrs[0][4] == pytest.approx(10.0) and attrs[3][4] is None
    assert attrs[3][5:] == ("HTTPStatusError(\"Server error '500 Internal Server Error'\")", "ERROR")
    assert attrs[2][5:] == ("cancelled", "ERROR") and attrs[0][5:] == (None, "UNSET")
    again = _import(f, archive_path)
    assert again.exit_code == 0 and "1 already imported" in again.output
    assert rows(archive_path, "SELECT count(*) FROM requests") == [(5,)]


def test_guidellm_0_4_report_without_metadata_is_read(tmp_path, archive_path):
    report = _report()
    del report["metadata"]
    f = tmp_path / "benchmarks.json"
    f.write_text(json.dumps(report))
    assert _import(f, archive_path).exit_code == 0
    assert rows(archive_path, "SELECT count(*) FROM requests") == [(5,)]


def _v03_report() -> dict:
    """A GuideLLM 0.3 report: per-request `generative_text_response` records (src/guidellm/benchmark/benchmark.py
    at v0.3.1)."""
    rec = {
        "type_": "generative_text_response",
        "request_id": "r0",
        "request_type": "text_completions",
        "scheduler_info": {},
        "prompt": "p",
        "output": "o",
        "prompt_tokens": 10,
        "output_tokens": 5,
        "start_time": T0,
        "end_time": T0 + 1,
        "first_token_time": T0 + 0.1,
        "last_token_time": T0 + 0.9,
    }
    return {
        "benchmarks": [
            {"type_": "generative_benchmark", "requests": {"successful": [rec], "errored": [], "incomplete": []}}
        ]
    }


@pytest.mark.parametrize(
    "content, name, message",
    [
        ('{"metadata": {"version": 2},\n "benchmarks": [\n', "benchmarks.json", "{f}: line 3: not JSON"),
        ("[1, 2]", "benchmarks.json", "{f}: not a GuideLLM report (want a JSON object with a `benchmarks` list)"),
        (
            json.dumps(_v03_report()),
            "benchmarks.json",
            "{f}: benchmarks[0].requests.successful[0]: a GuideLLM 0.2/0.3 report (`generative_text_response` records) "
            "is not read; re-run the benchmark with GuideLLM 0.4 or later",
        ),
        (
            json.dumps(_report(version=3)),
            "benchmarks.json",
            "{f}: GuideLLM report schema version 3 (guidellm 0.7.3) is not read; this reads versions 1–2 and unversioned "
            "0.4 reports",
        ),
        (
            "benchmarks: []\n",
            "benchmarks.yaml",
            "{f}: a GuideLLM YAML report is not read; write its JSON with `guidellm export benchmarks.yaml --output json`",
        ),
    ],
)
def test_bad_guidellm_file_is_one_line_and_lands_nothing(tmp_path, archive_path, content, name, message):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_report()))
    assert _import(good, archive_path).exit_code == 0
    before = rows(
        archive_path,
        "SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM requests), (SELECT count(*) FROM ingest_batches)",
    )
    f = tmp_path / name
    f.write_text(content)
    r = _import(f, archive_path)
    assert r.exit_code == 2
    assert r.stderr.startswith("budgetscope: " + message.format(f=f)) and r.stderr.count("\n") == 1
    assert r.stderr.endswith(" (nothing from it landed)\n") and "Traceback" not in r.output
    assert (
        rows(
            archive_path,
            "SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM requests), "
            "(SELECT count(*) FROM ingest_batches)",
        )
        == before
    )


def test_bad_guidellm_timing_names_the_request(tmp_path, archive_path):
    report = _report()
    report["benchmarks"][0]["requests"]["errored"][0]["info"]["timings"]["request_start"] = "soon"
    f = tmp_path / "benchmarks.json"
    f.write_text(json.dumps(report))
    r = _import(f, archive_path)
    assert r.exit_code == 2
    assert r.stderr == (
        f"budgetscope: {f}: benchmarks[0].requests.errored[0] info.timings.request_start: expected a "
        'number, got "soon" (nothing from it landed)\n'
    )
    assert not archive_path.exists()  # nothing landed: the archive the import would have created is not left behind
