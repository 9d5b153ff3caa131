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
    if sc.expect is None:
        assert tier["kept"], tier["verdict"]
    else:
        a = tier["attribution"][sc.metric]
        assert a["dominant"] == sc.expect, tier["verdict"]
        assert a["shares"][sc.expect] >= 0.5 or a["verdict"] == "mixed", tier["verdict"]


def test_offline_demo_finds_the_injected_queue_tail(tmp_path):
    from budgetscope.demo.offline import run_offline_demo

    result = run_offline_demo(tmp_path, num_requests=1500)
    assert (result.dominant_ttft, result.report["tiers"][0]["attribution"]["ttft"]["verdict"]) == ("queue", "dominated")
