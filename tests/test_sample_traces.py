"""The recorded sample archives open, and each report names the cause its scenario injected."""

from __future__ import annotations

from pathlib import Path

import pytest

from budgetscope.analysis import build_report, load_budgets
from budgetscope.archive import Archive
from budgetscope.demo.scenarios import SCENARIOS

SAMPLES = Path(__file__).parent.parent / "sample_traces"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_sample_archive_report(name):
    sc = SCENARIOS[name]
    with Archive(SAMPLES / f"{name}.duckdb", read_only=True) as a:
        (t,) = build_report(a.con, load_budgets(SAMPLES / "budgets.toml"))["tiers"]
    assert t["figures"] == "client" and t["requests"] >= 40
    if sc.expect is None:
        assert t["kept"]
    else:
        assert not t["kept"] and t["attribution"][sc.metric]["dominant"] == sc.expect


def test_sample_budgets_are_the_demo_budgets():
    from budgetscope.demo.offline import demo_budgets_path

    assert (SAMPLES / "budgets.toml").read_text() == demo_budgets_path().read_text()
