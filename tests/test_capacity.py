"""The capacity analysis on hand-made points: capacity, knee, takeover stage, how sure; Wilson intervals."""

import pytest

from budgetscope.analysis.capacity import tier_capacity, wilson


def _point(rate, served, keeps, ttft, shares, attainment=1.0, n=100):
    k = round(attainment * n)
    return {
        "rate_rps": rate,
        "runs": 1,
        "served_rps": served,
        "tiers": {
            "chat": {
                "keeps": keeps,
                "runs": 1,
                "attainment": attainment,
                "attainment_spread": [attainment, attainment],
                "attainment_interval": wilson(k, n),
                "requests": n,
                "ttft": ttft,
                "ttft_spread": [ttft, ttft],
                "ttft_key": "p99",
                "ttft_shares": shares,
                "ttft_dominant": max(shares, key=shares.get),
                "breaches": []
                if keeps
                else [{"kind": "metric", "name": "ttft_ms", "value": ttft, "budget": 800.0, "quantile": "p99"}],
            }
        },
    }


QUIET = {"queue": 0.05, "prefill": 0.9, "network": 0.05}
BUSY = {"queue": 0.8, "prefill": 0.15, "network": 0.05}


def test_capacity_knee_and_the_stage_that_takes_over():
    pts = [
        _point(1, 1.0, True, 100, QUIET),
        _point(2, 2.0, True, 110, QUIET),
        _point(4, 4.0, True, 150, QUIET),
        _point(6, 5.9, True, 400, {"queue": 0.6, "prefill": 0.35, "network": 0.05}),
        _point(8, 6.1, False, 2400, BUSY, attainment=0.4),
    ]
    c = tier_capacity(pts, "chat", 0.99)
    assert (c["capacity_rps"], c["first_break_rps"]) == (6, 8)
    assert not c["capacity_is_lower_bound"]
    # 150 → 400 ms from 4 to 6 req/s: elasticity ln(2.67)/ln(1.5) = 2.4 > 1 and 4× the lightest: the knee is 4
    assert c["knee_rps"] == 4
    assert "elasticity 2.42" in c["knee_reason"]
    t = c["takeover"]
    assert (t["stage"], t["at_rps"], t["above_rps"], t["low_rps"]) == ("queue", 6, 4, 1)
    assert t["share"] == pytest.approx(0.6) and t["low_share"] == pytest.approx(0.05)
    assert c["break_reasons"] == ["p99 ttft_ms 2400.0 ms > 800 ms", "attainment 40.0% < 99%"]
    assert c["verdict"].startswith("Tier chat keeps its budgets up to 6 req/s and breaks them at 8 req/s")
    assert "Above 4 req/s queue is 60% of the TTFT tail (at 6 req/s; 5% at 1 req/s)." in c["verdict"]
    assert c["confidence"]["at_first_break"]["resolved"]  # 40 of 100: surely under 99 %
    assert not c["confidence"]["at_capacity"]["resolved"]  # 100 of 100 cannot prove >= 99 %


def test_a_server_falling_behind_the_offered_rate_is_a_knee_even_with_flat_latency():
    pts = [_point(1, 1.0, True, 100, QUIET), _point(2, 2.0, True, 100, QUIET), _point(4, 3.0, True, 110, QUIET)]
    c = tier_capacity(pts, "chat", 0.99)
    assert c["knee_rps"] == 2 and "served 3.00 req/s ok" in c["knee_reason"]
    assert c["capacity_rps"] == 4 and c["capacity_is_lower_bound"]


def test_no_knee_and_noise_under_twice_the_lightest_rate_is_not_one():
    # 100 → 150 ms from 1 to 1.25 req/s: elasticity 1.8 but not twice the lightest rate's TTFT
    pts = [_point(1, 1.0, True, 100, QUIET), _point(1.25, 1.25, True, 150, QUIET), _point(2, 2.0, True, 160, QUIET)]
    c = tier_capacity(pts, "chat", 0.99)
    assert c["knee_rps"] is None and "did not turn up" in c["knee_reason"]
    assert c["takeover"]["above_rps"] is None and c["takeover"]["stage"] == "prefill"
    assert "At 2 req/s prefill is 90% of the TTFT tail" in c["verdict"]


def test_breaking_at_the_lightest_rate():
    c = tier_capacity([_point(1, 1.0, False, 900, BUSY, attainment=0.5)], "chat", 0.99)
    assert c["capacity_rps"] is None and c["first_break_rps"] == 1
    assert c["verdict"].startswith("Tier chat breaks its budgets already at the lightest rate, 1 req/s")


def test_wilson_interval():
    assert wilson(0, 0) is None
    lo, hi = wilson(50, 100)
    assert (round(lo, 4), round(hi, 4)) == (0.4038, 0.5962)  # the textbook figures for 50/100
    lo, hi = wilson(10, 10)
    assert hi == 1.0 and round(lo, 4) == 0.7225


def test_a_spike_that_the_next_rates_undo_is_not_the_knee():
    pts = [
        _point(2, 2.0, True, 33, QUIET),
        _point(4, 4.0, True, 139, QUIET),
        _point(8, 8.0, True, 38, QUIET),
        _point(12, 12.0, False, 505, BUSY, attainment=0.79),
    ]
    c = tier_capacity(pts, "chat", 0.99)
    assert c["knee_rps"] == 8 and "38 → 505 ms from 8 to 12 req/s" in c["knee_reason"]


def _step(rate, attainment, ttft, keeps, queue_share, n=200):
    shares = {"queue": queue_share, "prefill": 1 - queue_share}
    return {
        "rate_rps": rate,
        "served_rps": rate * 0.98,
        "tiers": [
            {
                "name": "chat",
                "requests": n,
                "judged_requests": n,
                "percentile": 99.0,
                "attainment": attainment,
                "keeps": keeps,
                "metrics": {"ttft_ms": {"p99": ttft}},
                "attribution": {"ttft": {"shares": shares}},
                "breaches": []
                if keeps
                else [{"kind": "metric", "name": "ttft_ms", "value": ttft, "budget": 800.0, "quantile": "p99"}],
            }
        ],
    }


def test_runs_of_one_rate_pool_into_one_point_with_their_spread():
    """`--runs 2`: the two steps of a rate become one point: it keeps only if both kept, attainment and TTFT are
    medians with their (min, max), the interval pools every request, and the capacity says how many runs."""
    from budgetscope.analysis.capacity import points

    steps = [
        _step(4, 1.0, 100, True, 0.1),
        _step(4, 0.995, 140, True, 0.3),
        _step(8, 1.0, 300, True, 0.5),
        _step(8, 0.90, 1900, False, 0.9),
    ]
    p4, p8 = points(steps)
    t4, t8 = p4["tiers"]["chat"], p8["tiers"]["chat"]
    assert (p4["runs"], t4["runs"], t4["requests"]) == (2, 2, 400)
    assert t4["keeps"] and not t8["keeps"]  # one run of 8 broke: 8 breaks
    assert t4["attainment"] == pytest.approx(0.9975) and t4["attainment_spread"] == [0.995, 1.0]
    assert (t4["ttft"], t4["ttft_spread"]) == (120, [100, 140])
    assert t4["attainment_interval"] == wilson(399, 400)
    assert t8["ttft_shares"]["queue"] == pytest.approx(0.7) and t8["ttft_dominant"] == "queue"
    c = tier_capacity([p4, p8], "chat", 0.99)
    assert (c["capacity_rps"], c["first_break_rps"]) == (4, 8)
    assert c["confidence"]["runs_per_rate"] == [2]
    assert c["confidence"]["at_first_break"]["attainment_spread"] == [0.90, 1.0]


def _repeat_step(rate, repeat, keeps):
    s = _step(rate, 1.0 if keeps else 0.5, 100 if keeps else 2000, keeps, 0.2 if keeps else 0.9)
    return s | {"repeat": repeat}


def test_repeats_give_each_repeats_capacity_and_a_student_t_interval():
    """`--repeats 3`: repeat 0 keeps up to 8 req/s, repeat 1 up to 4, repeat 2 up to 6 (machine load differs). The
    pooled point says 4 (every run must keep); beside it each repeat's own capacity, their spread, mean 6 and the
    95 % Student-t interval 6 ± 4.303 × 2 / √3."""
    from budgetscope.analysis.capacity import repeat_capacity

    kept = {0: (4, 6, 8), 1: (4,), 2: (4, 6)}
    steps = [_repeat_step(rate, r, rate in kept[r]) for r in range(3) for rate in (4, 6, 8, 12)]
    r = repeat_capacity(steps, "chat", 0.99)
    assert r["by_repeat"] == [8, 4, 6] and r["spread"] == [4, 8] and r["mean"] == 6
    lo, hi = r["interval_95"]
    assert (lo, hi) == (pytest.approx(6 - 4.303 * 2 / 3**0.5), pytest.approx(6 + 4.303 * 2 / 3**0.5))
    assert repeat_capacity([s for s in steps if s["repeat"] == 0], "chat", 0.99) is None  # one repeat: no interval


def test_a_repeat_that_breaks_at_the_lowest_rate_is_unknown_not_zero():
    from budgetscope.analysis.capacity import repeat_capacity

    steps = [_repeat_step(4, 0, True), _repeat_step(8, 0, False), _repeat_step(4, 1, False), _repeat_step(8, 1, False)]
    r = repeat_capacity(steps, "chat", 0.99)
    assert r["by_repeat"] == [4, None] and r["unknown_repeats"] == [1]
    assert r["interval_95"] is None and r["spread"] == [4, 4]


def test_a_concurrency_sweep_speaks_in_requests_in_flight():
    """Closed-loop points: the level is the concurrency, the keys say so, the served-rate knee rule (an offered
    rate) does not apply, and the capacity carries the ok rate served there."""
    pts = [
        _point(1, 9.0, True, 100, QUIET) | {"concurrency": 1, "rate_rps": None},
        _point(4, 9.5, True, 150, QUIET) | {"concurrency": 4, "rate_rps": None},
        _point(16, 9.6, False, 1500, BUSY, attainment=0.5) | {"concurrency": 16, "rate_rps": None},
    ]
    c = tier_capacity(pts, "chat", 0.99)
    assert c["unit"] == "concurrent requests" and "capacity_rps" not in c
    assert (c["capacity_concurrency"], c["first_break_concurrency"], c["knee_concurrency"]) == (4, 16, 4)
    assert c["capacity_served_rps"] == 9.5
    assert "150 → 1500 ms from 4 to 16 concurrent requests" in c["knee_reason"]
    assert (
        c["verdict"].startswith(
            "Tier chat keeps its budgets up to 4 concurrent requests and breaks them at 16 concurrent requests"
        )
        and "it served 9.50 req/s ok" in c["verdict"]
    )


def test_the_text_gives_each_repeats_capacity_and_the_interval():
    from budgetscope.analysis.capacity_render import _repeats_line

    tier = {
        "unit": "req/s",
        "repeats": {
            "by_repeat": [8, 4, 6],
            "unknown_repeats": [],
            "spread": [4, 8],
            "mean": 6.0,
            "interval_95": [6 - 4.969, 6 + 4.969],
        },
    }
    assert _repeats_line(tier) == [
        "Repeats: capacity per repeat (req/s) 8, 4, 6; mean 6.00, 95% interval 1.03-10.97 (Student t over 3 repeats)."
    ]
    tier["repeats"] = {
        "by_repeat": [4, None],
        "unknown_repeats": [1],
        "spread": [4, 4],
        "mean": 4.0,
        "interval_95": None,
    }
    assert _repeats_line(tier) == ["Repeats: capacity per repeat (req/s) 4, below the lowest; spread 4-4."]
    assert _repeats_line({"unit": "req/s", "repeats": None}) == []


def test_a_sweep_without_server_spans_names_no_stage():
    """Every level's requests the client's alone (no server span reached the sweep): the tail is all `unaccounted`,
    and the verdict says the stages are unknown rather than that `unaccounted` takes over."""
    alone = {"unaccounted": 1.0}
    pts = [_point(2, 2.0, True, 100, alone), _point(4, 3.0, True, 120, alone)]
    for p in pts:
        p["server_spans"] = 0
    c = tier_capacity(pts, "chat", 0.99)
    assert c["stages_known"] is False and c["takeover"]["stage"] == "unaccounted"
    assert "No server span reached the sweep: the stages are unknown" in c["verdict"]
    assert "unaccounted is 100% of the TTFT tail" not in c["verdict"]
    pts[1]["server_spans"] = 3  # some did, at one level: the takeover is said as measured
    c = tier_capacity(pts, "chat", 0.99)
    assert c["stages_known"] is True and "unaccounted is 100% of the TTFT tail" in c["verdict"]
