"""`budgetscope example grafana`: valid JSON whose every expression reads series a `collect --budgets` exports
(scraped from a real collector), and parses as PromQL (promtool, when installed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from budgetscope.alerting.yaml_text import dump
from budgetscope.analysis.budgets import parse_budgets
from budgetscope.collector import Collector


def _exprs(doc: dict) -> list[str]:
    out = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    out += [v["query"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return out


@pytest.fixture(scope="module")
def board() -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "budgetscope.cli", "example", "grafana"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_every_expression_names_a_series_collect_exports(board, archive_path):
    budgets = parse_budgets("[tiers.interactive]\nttft_ms = 250\n[tiers.interactive.stages]\nqueue = 100\n")
    with Collector(archive_path, grpc_port=None, http_port=0, budgets=budgets, attribution_every_s=3600) as c:
        # the attribution's lag is exported once its first computation (at start, in its thread) has read a commit
        deadline = time.monotonic() + 60
        while (
            "budgetscope_attribution_lag_seconds"
            not in (text := httpx.get(f"http://127.0.0.1:{c.http_port}/metrics").text)
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
    exported = {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
    names = set()
    for expr in _exprs(board):
        found = set(re.findall(r"\bbudgetscope_[a-z_]+", expr))
        assert found, expr
        names |= found
    families = set(re.findall(r"^# TYPE (\S+)", text, re.M))
    missing = {n for n in names if n not in exported and n not in families}
    assert not missing, missing
    assert {p["type"] for p in board["panels"]} >= {"stat", "timeseries", "table"}
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing: `apt-get install prometheus`")
def test_every_expression_is_promql(board, tmp_path):
    rules = [
        {"record": f"check:expr{i}", "expr": e.replace("$tier", ".*").replace("$figure", ".*")}
        for i, e in enumerate(_exprs(board))
        if not e.startswith("label_values(")
    ]
    (tmp_path / "r.yml").write_text(dump({"groups": [{"name": "grafana", "rules": rules}]}))
    out = subprocess.run(["promtool", "check", "rules", str(tmp_path / "r.yml")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
