"""Values for people: times, bytes and figures in the unit their column's name says, never 1795395905579997569
or 4e+09."""

from __future__ import annotations

from budgetscope.analysis import display


def test_times_bytes_and_figures():
    assert display.value("arrival_ns", 1795395905579997569) == "2026-11-23 01:05:05.579 UTC"
    assert display.value("hbm_used_bytes", 4e9) == "4.00 GB"
    assert display.value("hbm_used_bytes", 512_000) == "512 kB"
    assert display.value("hbm_used_bytes", 999) == "999 B"
    assert display.value("e2e_ms", 2410.0) == "2.41 s"
    assert display.value("queue_depth_mean", 4e9) == "4,000,000,000"
    assert display.value("kv_usage_mean", 0.4567) == "0.457"
    assert display.value("arrivals_per_s", 12.0) == "12"
    assert display.value("anything", None) == "n/a"


def test_a_table_for_people_keeps_ids_and_durations_as_they_are():
    cols = ["request_id", "arrival_ns", "e2e_ms", "input_tokens"]
    assert display.table(cols, [("r1", 1795395905579997569, 12.5, 100), ("r2", None, None, None)]) == [
        {"request_id": "r1", "arrival (UTC)": "2026-11-23 01:05:05.579 UTC", "e2e_ms": 12.5, "input_tokens": 100},
        {"request_id": "r2", "arrival (UTC)": None, "e2e_ms": None, "input_tokens": None},
    ]


def test_what_moved_in_one_line():
    moved = {
        "hbm_used_bytes": {"inside": 4e9, "outside": 3.1e9},
        "queue_depth_mean": {"inside": 12.0, "outside": None},
        "dram_bandwidth": {"inside": None, "outside": 0.2},
    }
    assert display.moved(moved) == "hbm_used_bytes 4.00 GB vs 3.10 GB; queue_depth_mean 12 vs n/a"


def test_a_change_that_rounds_to_nothing_is_no_change():
    assert display.change(71.0, 71.04, "pts") is None  # what if, budgets untouched: no green "↑ +0.0 pts"
    assert display.change(71.0, 73.5, "pts") == "+2.5 pts"
    assert display.change(2, 1, "", digits=0) == "-1"
    assert display.change(None, 73.5, "pts") is None
