"""The burn rates `report` computes from the archive equal what Prometheus computes from `collect --budgets`'s
counters over the same requests: a real Prometheus (Debian's package) reads the counters minute by minute
(backfilled with `promtool tsdb create-blocks-from openmetrics`) and answers the generated recording rules'
expressions at a few instants; the report ends its windows at the same instants.

The counters judge each request with `judging.judged_sql`/`within_sql`, the collector's own (test_live_slis.py
holds the collector's counters to the report's totals). A request arrives inside a minute and is counted in the
scrape at the minute's end, so the counters' increase over [t − w, t] (Prometheus 2's closed range) holds
exactly the requests that arrived in [t − w, t), the report's window."""

from __future__ import annotations

import json
import math
import random
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import duckdb
import pyarrow as pa
import pytest

from budgetscope import schema
from budgetscope.alerting.rules import tier_rules
from budgetscope.analysis import judging
from budgetscope.analysis.budgets import parse_budgets
from budgetscope.analysis.judging import budgeted_figures
from budgetscope.analysis.report import build_report
from budgetscope.analysis.selection import Selection
from budgetscope.analysis.slo import WINDOWS

PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None, reason="prometheus missing: `apt-get install prometheus`"
)
BUDGETS = parse_budgets(
    """
[tiers.interactive]
percentile = 99
ttft_ms = 400
tpot_ms = 40
[tiers.interactive.stages]
queue = 100
[tiers.batch]
match = { model = "big" }
percentile = 95
e2e_ms = 1000
""",
    "budgets.toml",
)
BASE_S = 1_767_225_600  # 2026-01-01T00:00:00Z
MINUTES = 4 * 24 * 60 + 90  # four days and a half hour: every window, the 3-day one too, has a clean past


def _rows(rng: random.Random) -> list[dict]:
    """Requests inside minutes (never on a minute's edge), a few a minute, with quiet minutes, a slow day and a
    burst of failures; some figures unknown, some requests cancelled."""
    out = []
    for m in range(MINUTES):
        slow = 3 * 1440 <= m < 3 * 1440 + 300  # five slow hours late on day 4
        failing = 4 * 1440 + 40 <= m < 4 * 1440 + 55
        for _ in range(rng.choice([0, 0, 1, 2, 3])):
            r = {}
            q = rng.lognormvariate(3.5, 0.6) * (8 if slow and rng.random() < 0.5 else 1)
            r.update(
                trace_id=f"{rng.getrandbits(128):032x}",
                tier=rng.choice(["interactive", "batch"]),
                model=rng.choice(["big", "small"]),
                source="native",
                outcome="error"
                if failing and rng.random() < 0.7
                else rng.choice(["ok"] * 30 + ["timeout", "cancelled"]),
                arrival_ns=(BASE_S + m * 60 + rng.randint(1, 58)) * 10**9 + rng.randint(0, 10**9 - 1),
                ttft_queue_ms=q,
                ttft_ms=None if rng.random() < 0.02 else q + rng.uniform(50, 250),
                tpot_ms=math.nan if rng.random() < 0.05 else rng.uniform(10, 60),
                has_client_span=False,
            )
            r["e2e_ms"] = (r["ttft_ms"] or 0) + rng.uniform(100, 900)
            out.append(r)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(port: int, expr: str, at_s: int) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": at_s})
    with urllib.request.urlopen(url, timeout=30) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return {(s["metric"]["tier"], s["metric"]["figure"]): float(s["value"][1]) for s in body["data"]["result"]}


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """(DuckDB connection with the requests, the port of a Prometheus over their counters)."""
    tmp = tmp_path_factory.mktemp("parity")
    rows = _rows(random.Random(11))
    con = duckdb.connect()
    for stmt in schema.create_statements():
        con.execute(stmt)
    given = list(rows[0])  # every row sets the same columns; the others stay NULL
    table = pa.table({k: [r[k] for r in rows] for k in given})
    con.register("bs_given", table)
    con.execute(f"INSERT INTO requests BY NAME SELECT {', '.join(given)} FROM bs_given")
    con.unregister("bs_given")
    keys, aggs, params = [], [], []
    for tb in BUDGETS.tiers:
        member = Selection(tb.filters)
        for f in budgeted_figures(tb):
            keys.append((tb.name, f))
            for what in (judging.judged_sql(tb, f), judging.within_sql(tb, f)):
                aggs.append(f"count_if({' AND '.join(member.clauses)} AND ({what}))")
                params += member.params
    per_minute = {
        m: row
        for m, *row in con.execute(
            f"SELECT (arrival_ns // 60_000_000_000 - {BASE_S // 60}) + 1 AS m, {', '.join(aggs)} FROM requests "
            "GROUP BY 1",
            params,
        ).fetchall()
    }
    lines = {key: [] for key in keys}
    totals = [0] * len(aggs)
    for m in range(MINUTES + 1):  # the scrape at minute m counts the requests of the minute before
        totals = [a + b for a, b in zip(totals, per_minute.get(m, [0] * len(aggs)))]
        for i, key in enumerate(keys):
            lines[key].append((BASE_S + m * 60, totals[2 * i], totals[2 * i + 1]))
    text = []
    for name, i in (("budgetscope_sli_requests_judged_total", 1), ("budgetscope_sli_requests_within_total", 2)):
        text.append(f"# TYPE {name} unknown")
        for (tier, figure), samples in lines.items():
            text += [f'{name}{{tier="{tier}",figure="{figure}"}} {s[i]} {s[0]}' for s in samples]
    text.append("# EOF")
    (tmp / "counters.om").write_text("\n".join(text) + "\n")
    data = tmp / "data"
    made = subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(tmp / "counters.om"), str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    (tmp / "prometheus.yml").write_text("global: {}\n")
    port = _free_port()
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "prometheus.log", "w"),  # noqa: SIM115 - the server's log, read if it does not start
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp / "prometheus.log").read_text()[-2000:]
            time.sleep(0.1)
        yield con, port
    finally:
        proc.terminate()
        proc.wait(30)
        con.close()


@pytest.mark.slow
@pytest.mark.parametrize("minute", [MINUTES, 3 * 1440 + 200, 4 * 1440 + 50])
def test_report_burn_rates_equal_prometheus_over_the_same_requests(counted, minute):
    con, port = counted
    at_s = BASE_S + minute * 60
    rep = build_report(con, BUDGETS, until_ns=at_s * 10**9)
    compared = 0
    for t in tier_rules(BUDGETS):
        entry = next(e for e in rep["tiers"] if e["name"] == t.tb.name)
        rates = entry["burn_rates"]
        assert rates["end_ns"] == at_s * 10**9 and rates["error_budget"] == t.budget
        for window in WINDOWS:
            prom = _query(port, t.ratio_rule(window)["expr"], at_s)
            for figure in t.figures:
                mine = rates["figures"][figure]["windows"][window]
                theirs = prom.get((t.tb.name, figure))
                if mine["error_ratio"] is None:  # no judged request: Prometheus divides 0 by 0
                    assert theirs is not None and math.isnan(theirs), (window, figure)
                    continue
                assert theirs == pytest.approx(mine["error_ratio"], rel=1e-12, abs=1e-15), (window, figure)
                assert theirs / t.budget == pytest.approx(mine["burn_rate"], rel=1e-12, abs=1e-12)
                compared += 1
    assert compared >= 7 * 4 - 2  # every window of every figure, but a quiet 5 minutes
    burning = next(e for e in rep["tiers"] if e["name"] == "interactive")["burn_rates"]["figures"]["queue"]
    if minute == 3 * 1440 + 200:  # inside the slow hours: the queue budget burns fast
        assert burning["windows"]["1h"]["burn_rate"] > 14.4
