"""`budgetscope rules`: the generated Prometheus rules pass Debian's `promtool check rules`, and the generated unit
tests of every alert pass `promtool test rules` (the Workbook's detection times, the annotations read from the
gauges); a rule that reads the wrong gauge fails them. Needs `promtool` (Debian's `prometheus` package, which
`make setup` installs)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from budgetscope.alerting.rule_tests import scenarios
from budgetscope.alerting.rules import ALERTS, duration, tier_rules
from budgetscope.analysis.budgets import load_budgets, parse_budgets

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: `apt-get install prometheus`")
DEMO = Path(__file__).resolve().parent.parent / "budgetscope" / "data" / "demo_budgets.toml"
TWO_TIERS = """
[tiers.interactive]
percentile = 99
ttft_ms = 250
[tiers.interactive.stages]
queue = 100
[tiers.batch]
percentile = 95
e2e_ms = 5000
"""


def _rules(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "budgetscope.cli", "rules", *args], capture_output=True, text=True, cwd=cwd, timeout=60
    )


def _promtool(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300)


@needs_promtool
@pytest.mark.parametrize("scale", ["1", "0.01"])
def test_promtool_checks_the_rules_of_every_tier_and_figure(tmp_path, scale):
    budgets = tmp_path / "b.toml"
    budgets.write_text(DEMO.read_text() + TWO_TIERS.replace("interactive", "chat"))
    out = _rules("--budgets", str(budgets), "--window-scale", scale, "-o", "r.yml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    check = _promtool("check", "rules", "r.yml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    doc = yaml.safe_load((tmp_path / "r.yml").read_text())
    alerts = {
        (r["alert"], r["labels"]["tier"], r["labels"]["figure"])
        for g in doc["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    # interactive: ttft tpot e2e network frontend queue prefill; chat: ttft queue; batch: e2e — each a page and a ticket
    assert len(alerts) == 2 * (7 + 2 + 1)
    records = [r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r]
    assert len(records) == 3 * 7 and "budgetscope:sli_error_ratio:rate3d" in records
    page = next(r for g in doc["groups"] for r in g["rules"] if r.get("alert") == ALERTS["page"])
    if scale == "1":
        assert "rate1h{" in page["expr"] and "/ 0.01 > 14.4" in page["expr"] and "/ 0.01 > 6 " in page["expr"]
        assert "[1h]" in doc["groups"][0]["rules"][2]["expr"]
    else:
        assert "[36s]" in doc["groups"][0]["rules"][2]["expr"]  # the 1h window at 0.01


@needs_promtool
@pytest.mark.slow
def test_promtool_unit_tests_cover_every_alert_and_the_workbook_detection_times(tmp_path):
    (tmp_path / "b.toml").write_text(TWO_TIERS)
    out = _rules("--budgets", "b.toml", "-o", "r.yml", "--unit-tests", "--archive", "/data/prod", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    tests = sorted(tmp_path.glob("r.*.test.yml"))
    assert [p.name for p in tests] == ["r.page-1m.test.yml", "r.ticket-5m.test.yml"]
    rules = yaml.safe_load((tmp_path / "r.yml").read_text())
    every = {
        (r["alert"], r["labels"]["tier"], r["labels"]["figure"])
        for g in rules["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    fired = set()
    for p in tests:
        for group in yaml.safe_load(p.read_text())["tests"]:
            for t in group["alert_rule_test"]:
                for a in t["exp_alerts"]:
                    fired.add((t["alertname"], a["exp_labels"]["tier"], a["exp_labels"]["figure"]))
                    assert a["exp_annotations"]["dominant_stage"] == "queue"
                    assert a["exp_annotations"]["dominant_share"] == "81%"
                    assert a["exp_annotations"]["contrast"] == "instance=replica-3"
                    assert a["exp_annotations"]["report"].startswith(
                        "budgetscope report --archive /data/prod --budgets b.toml --since "
                    )
    assert fired == every
    # a p99 tier's total outage: silent 8 min in, paging 9 min in (the Workbook: 14.4 % of the hour, 8.64 min)
    page = yaml.safe_load(tests[0].read_text())["tests"][0]
    assert "error ratio 1 from 6h on" in page["name"] and "8.64 min in" in page["name"]
    quiet, loud = page["alert_rule_test"]
    assert (quiet["eval_time"], quiet["exp_alerts"]) == ("368m", [])
    assert loud["eval_time"] == "369m" and len(loud["exp_alerts"]) == 2
    assert "burning at 15.0× over 1h: queue 81% of the TTFT tail" in loud["exp_alerts"][0]["exp_annotations"]["summary"]
    run = _promtool("test", "rules", *[p.name for p in tests], cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("SUCCESS") == 2


@needs_promtool
@pytest.mark.slow
def test_the_unit_tests_fail_a_rule_that_reads_the_wrong_gauge(tmp_path):
    (tmp_path / "b.toml").write_text("[tiers.interactive]\npercentile = 99\nttft_ms = 250\n")
    assert _rules("--budgets", "b.toml", "-o", "r.yml", "--unit-tests", cwd=tmp_path).returncode == 0
    r = tmp_path / "r.yml"
    r.write_text(
        r.read_text().replace("topk(1, budgetscope_attribution_share", "bottomk(1, budgetscope_attribution_share")
    )
    run = _promtool("test", "rules", "r.page-1m.test.yml", cwd=tmp_path)
    assert run.returncode != 0 and "FAILED" in run.stdout + run.stderr
    assert 'dominant_stage="prefill"' in run.stdout + run.stderr  # what it got instead of queue


def test_a_condition_that_cannot_fire_is_said_and_left_out_of_the_tests(tmp_path):
    (tmp_path / "b.toml").write_text("[tiers.loose]\npercentile = 90\nttft_ms = 250\n")
    out = _rules("--budgets", "b.toml", cwd=tmp_path)
    assert out.returncode == 0
    assert out.stderr.splitlines() == [
        "budgetscope rules: tier loose (p90, error budget 10 %): the page condition 14.4× over 1h needs an error "
        "ratio over 144 %: it never fires"
    ]
    (t,) = tier_rules(parse_budgets((tmp_path / "b.toml").read_text()))
    assert [(s.severity, s.error_ratio) for s in scenarios(t)] == [("page", 1.0), ("ticket", 0.5)]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--unit-tests"], "budgetscope: --unit-tests writes its files beside the rules: give --output FILE"),
        (["--window-scale", "0"], "budgetscope: the window scale must be > 0, got 0.0"),
        (["-o", "no/such/dir/r.yml"], "budgetscope: cannot write no/such/dir/.r.yml.tmp: No such file or directory"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, message):
    (tmp_path / "b.toml").write_text(DEMO.read_text())
    out = _rules("--budgets", "b.toml", *args, cwd=tmp_path)
    assert (out.returncode, out.stderr.strip().splitlines(), out.stdout) == (2, [message], "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.toml"]


def test_a_bad_budgets_file_is_one_line(tmp_path):
    out = _rules("--budgets", str(tmp_path / "missing.toml"), cwd=tmp_path)
    assert (out.returncode, out.stderr.strip()) == (
        2,
        f"budgetscope: {tmp_path / 'missing.toml'}: no such budgets file",
    )


def test_durations_are_prometheus_durations():
    assert [duration(s) for s in (300, 3600, 259200, 36, 2.592, 0.0001, 5400)] == [
        "5m",
        "1h",
        "3d",
        "36s",
        "2592ms",
        "1ms",
        "90m",
    ]


def test_the_demo_budgets_make_rules_for_every_budgeted_figure():
    (t,) = tier_rules(load_budgets(DEMO))
    assert list(t.figures) == ["ttft", "tpot", "e2e", "network", "frontend", "queue", "prefill"]
    assert t.budget == 0.01


@needs_promtool
def test_the_prometheus_config_of_the_docs_is_valid_with_the_rules(tmp_path):
    """docs/alerting.md's prometheus.yml, beside rules written for the demo's budgets."""
    import re

    text = (Path(__file__).resolve().parent.parent / "docs" / "alerting.md").read_text()
    (tmp_path / "prometheus.yml").write_text(re.findall(r"```yaml\n(# prometheus.yml\n.*?)```", text, re.S)[0])
    (tmp_path / "b.toml").write_text(DEMO.read_text())
    assert _rules("--budgets", "b.toml", "-o", "budgetscope-rules.yml", cwd=tmp_path).returncode == 0
    check = _promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 1 rule files found" in check.stdout + check.stderr
