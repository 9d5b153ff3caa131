"""Timeline analysis on small hand-computed archives: buckets, rolling quantiles, breach windows, engine and
GPU series, and what is said when a series is missing."""

from __future__ import annotations

import pytest

from budgetscope.analysis import timeline
from budgetscope.analysis.budgets import TierBudget, parse_budgets
from budgetscope.analysis.report import Selection, build_report
from budgetscope.opener import Archive
from otlp_wire import MS, T0, export, jsonl, native_request, span, span_id, trace_id

S = 1000 * MS
QUEUES = [10, 10, 210, 210, 10, 10]  # TTFT = 2 + q + 50: 62, 62, 262, 262, 62, 62 ms, one request a second


def _steps(n: int, service: str = "engine") -> dict:
    """n engine.step spans, one every 500 ms from T0: queue depth i, batch size i + 1, KV i of 10 blocks."""
    spans = [
        span(
            trace_id(),
            span_id(),
            "engine.step",
            T0 + i * 500 * MS,
            T0 + i * 500 * MS + 10 * MS,
            attributes={
                "budgetscope.step.batch_size": i + 1,
                "budgetscope.step.queue_depth": i,
                "budgetscope.step.kv_blocks_used": i,
                "budgetscope.step.kv_blocks_total": 10,
                "budgetscope.step.prefill_tokens": 0,
                "budgetscope.step.decode_seqs": 1,
                "budgetscope.step.preempted": 0,
            },
        )
        for i in range(n)
    ]
    return export(spans, service=service)


@pytest.fixture
def archive(archive_path, ingest_text):
    docs = [
        export(
            native_request(
                arrival=T0 + i * S,
                stages=(("frontend", 2), ("queue", q), ("prefill", 50), ("decode", 100), ("postprocess", 1)),
            )[1]
        )
        for i, q in enumerate(QUEUES)
    ]
    ingest_text(archive_path, jsonl(*docs, _steps(12)))
    return archive_path


def test_bucket_width_is_round_and_fits_the_target():
    assert timeline.choose_bucket_ns(20 * S) == 200 * MS  # 100 buckets
    assert timeline.choose_bucket_ns(2000 * S) == 30 * S  # 2000 s / 15 s = 133 > 120, / 30 s = 67
    assert timeline.choose_bucket_ns(1) == 100 * MS
    g = timeline.Grid.covering(T0 + 1500 * MS, T0 + 4 * S, S)
    assert (g.start_ns, g.num_buckets, g.end_ns) == (T0 + S, 4, T0 + 5 * S)


def test_rolling_quantile_arrivals_and_breach_window(archive):
    with Archive(archive, read_only=True) as a:
        grid = timeline.Grid.covering(T0, T0 + 5 * S, S)
        s = timeline.request_series(
            a.con, Selection({"tier": "interactive"}), grid, {"ttft_ms": "ttft_ms"}, 0.5, window_buckets=2
        )
    assert s["t_ns"] == [T0 + k * S for k in range(6)]
    assert s["requests"] == [1] * 6 and s["arrivals_per_s"] == [1.0] * 6
    # the median over the two buckets ending at k: 62, (62+62)/2, (62+262)/2, 262, (262+62)/2, 62
    assert s["ttft_ms"] == pytest.approx([62, 62, 162, 262, 162, 62])
    windows = timeline.breach_windows(s, {"ttft_ms": 100.0}, S)
    assert windows == [
        {"start_ns": T0 + 2 * S, "end_ns": T0 + 5 * S, "buckets": 3, "peaks": {"ttft_ms": pytest.approx(262)}}
    ]
    assert timeline.breach_windows(s, {"ttft_ms": None}, S) == []


def test_engine_series_averages_steps_per_bucket(archive):
    with Archive(archive, read_only=True) as a:
        grid = timeline.Grid.covering(T0, T0 + 5 * S, S)
        e, why = timeline.engine_series(a.con, grid)
        none, why_none = timeline.engine_series(a.con, grid, ["other-instance"])
    assert why is None
    # two steps a second: queue depths (0, 1), (2, 3), …; KV 0.0/0.1, 0.2/0.3, …
    assert e["queue_depth_mean"] == pytest.approx([0.5, 2.5, 4.5, 6.5, 8.5, 10.5])
    assert e["queue_depth_max"] == [1, 3, 5, 7, 9, 11]
    assert e["kv_usage_mean"] == pytest.approx([0.05, 0.25, 0.45, 0.65, 0.85, 1.05])
    assert e["steps"] == [2] * 6
    assert none is None and why_none == timeline.NO_STEPS_IN_RANGE


def test_tier_timeline_uses_the_report_figures_and_says_what_is_missing(archive):
    budgets = parse_budgets("[tiers.interactive]\npercentile = 50\nttft_ms = 100\n")
    with Archive(archive, read_only=True) as a:
        entry = build_report(a.con, budgets)["tiers"][0]
        tl = timeline.tier_timeline(a.con, budgets.tiers[0], entry, bucket_ns=S, window_buckets=2)
        empty = timeline.tier_timeline(a.con, budgets.tiers[0], entry, since_ns=T0 + 100 * S)
    assert tl["columns"] == {"ttft_ms": "ttft_ms", "e2e_ms": "e2e_ms"} and tl["budgets"]["ttft_ms"] == 100.0
    assert [(w["start_ns"], w["end_ns"]) for w in tl["breach_windows"]] == [(T0 + 2 * S, T0 + 5 * S)]
    moved = tl["breach_windows"][0]["moved"]
    # inside: buckets 2-4 (4.5, 6.5, 8.5); outside: buckets 0, 1, 5 (0.5, 2.5, 10.5)
    assert moved["queue_depth_mean"] == {"inside": pytest.approx(6.5), "outside": pytest.approx(4.5)}
    assert tl["gpu"] is None and tl["missing"]["dram_bandwidth"] == timeline.NO_GPU_SAMPLES
    assert "engine" not in tl["missing"]
    assert empty["empty"] and "no requests" in empty["why"]


def test_missing_engine_steps_and_gpu_samples_in_range(tmp_path, ingest_text):
    archive_path = tmp_path / "a.duckdb"  # rows written straight into a table: the single-file format allows it
    ingest_text(archive_path, jsonl(export(native_request(arrival=T0)[1])))
    with Archive(archive_path) as a:  # GPU samples as the sampler's metrics land them, one GPU, 1 s apart
        a.con.execute(
            "INSERT INTO gpu_samples (ts_ns, host_name, gpu_uuid, gpu_index, metric, value, unit, batch_id) "
            "VALUES (?, 'h', 'GPU-0', 0, 'hw.gpu.memory.usage', 4e9, 'By', 0), "
            "(?, 'h', 'GPU-0', 0, 'hw.gpu.memory.usage', 6e9, 'By', 0)",
            [T0, T0 + 100 * MS],
        )
    with Archive(archive_path, read_only=True) as a:
        grid = timeline.Grid.covering(T0, T0 + S, S)
        assert timeline.engine_series(a.con, grid) == (None, timeline.NO_ENGINE_STEPS)
        g, missing = timeline.gpu_series(a.con, grid)
        assert g["hbm_used_bytes"] == [5e9, None]
        assert missing == {"dram_bandwidth": timeline.NO_DRAM_BANDWIDTH}
        later = timeline.Grid.covering(T0 + 10 * S, T0 + 11 * S, S)
        assert timeline.gpu_series(a.con, later)[1]["hbm_used_bytes"] == timeline.NO_GPU_IN_RANGE


def test_window_requests_are_the_slowest_of_the_window(archive):
    with Archive(archive, read_only=True) as a:
        cols, rows, total = timeline.window_requests(
            a.con, TierBudget("interactive"), T0 + S, T0 + 4 * S, order_by="ttft_ms", limit=2
        )
    assert total == 3
    ttft = [r[cols.index("ttft_ms")] for r in rows]
    assert ttft == pytest.approx([262, 262])
