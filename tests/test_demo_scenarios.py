"""Each live scenario, run short with real processes over real sockets, puts its injected cause in the tail.

Engine (subprocess, tiny model on CPU) → OTLP/HTTP → collector → archive; load generator (subprocess) →
HTTP/SSE → engine (through a delaying TCP hop for slow-network), client spans → OTLP/HTTP → collector.
"""

from __future__ import annotations

import pytest

from budgetscope.analysis.budgets import load_budgets
from budgetscope.demo.live import run_scenario
from budgetscope.demo.offline import demo_budgets_path
from budgetscope.demo.scenarios import SCENARIOS

pytest.importorskip("torch")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_puts_its_cause_in_the_tail(name, tmp_path):
    sc = SCENARIOS[name]
    run = run_scenario(sc, tmp_path, load_budgets(demo_budgets_path()), duration_s=8.0, say=lambda m: None)
    (tier,) = run.report["tiers"]
    assert tier["requests"] >= 10 and tier["ok_requests"] == tier["requests"]
    assert tier["figures"] == "client"  # every server span joined its client span through traceparent
    # every request's stage components add up to its client TTFT and E2E (the attribution's premise)
    from budgetscope.archive import Archive

    with Archive(run.archive, read_only=True) as a:
        (bad,) = a.con.execute("""
            SELECT count(*) FILTER (WHERE abs(client_ttft_ms - (ttft_network_ms + ttft_frontend_ms + ttft_queue_ms
                                        + ttft_prefill_ms + ttft_unaccounted_ms)) > 1e-6
                                     OR abs(client_e2e_ms - (network_ms + frontend_ms + queue_ms + prefill_ms
                                        + decode_ms + postprocess_ms + unaccounted_ms)) > 1e-6
                                     OR ttft_ms > client_ttft_ms OR e2e_ms > client_e2e_ms)
            FROM requests""").fetchall()[0]
    assert bad == 0
    # `calm` is meant to keep its budgets, but that is a latency threshold: under a loaded CI machine it is
    # a timing assertion, so it is not checked here (sample_traces/calm records a calm run).
    if sc.expect is not None:
        a = tier["attribution"][sc.metric]
        assert a["dominant"] == sc.expect, tier["verdict"]
        assert a["shares"][sc.expect] >= 0.5 or a["verdict"] == "mixed", tier["verdict"]


def test_offline_demo_finds_the_injected_queue_tail(tmp_path):
    from budgetscope.demo.offline import run_offline_demo

    result = run_offline_demo(tmp_path, num_requests=1500)
    assert (result.dominant_ttft, result.report["tiers"][0]["attribution"]["ttft"]["verdict"]) == ("queue", "dominated")
