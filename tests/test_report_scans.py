"""The report's few scans give what its definitions say, query by query (the attribution of docs/design.md, each stage's
own quantile, attainment, the contrast): checked against the plain SQL of each definition on rows made to
hit the edges (a tail widened to the 10 slowest, a quantile equal to the median, NaN and NULL figures, tiers
with and without client spans, outcomes other than ok)."""

from __future__ import annotations

import math
import random

import duckdb
import pytest

from budgetscope import schema
from budgetscope.analysis import attribution, contrast, coverage, selection
from budgetscope.analysis.budgets import parse_budgets
from budgetscope.analysis.report import CLIENT_METRIC, STAGE_COLUMNS, build_report, pkey, tier_report

BUDGETS = """
[tiers.big]
percentile = 99
ttft_ms = 400
tpot_ms = 30
e2e_ms = 3000
[tiers.small]
percentile = 95
e2e_ms = 1000
[tiers.flat]
percentile = 90
[tiers.server]
percentile = 99
ttft_ms = 500
[tiers.none]
"""
STAGES = ("network_ms", "frontend_ms", "queue_ms", "prefill_ms", "decode_ms", "postprocess_ms", "unaccounted_ms")
TTFT_STAGES = ("ttft_network_ms", "ttft_frontend_ms", "ttft_queue_ms", "ttft_prefill_ms", "ttft_unaccounted_ms")


def _row(rng: random.Random, tier: str, client: bool, flat: bool = False) -> dict:
    r = {c.name: None for c in schema.REQUESTS.columns}
    v = (lambda: 100.0) if flat else (lambda: rng.lognormvariate(3, 1))
    r.update(
        trace_id=f"{rng.getrandbits(128):032x}",
        tier=tier,
        model=rng.choice(["m1", "m2"]),
        tenant=rng.choice([None, "t1", "t2"]),
        service_name="s",
        source="native",
        outcome=rng.choices(["ok", "error", "timeout"], [0.9, 0.07, 0.03])[0],
        input_tokens=rng.choice([10, 300, 2000, 9000]),
        output_tokens=rng.choice([1, 50, 500]),
        cached_tokens=rng.choice([None, 0, 64]),
        arrival_ns=1,
        first_token_ns=2,
        has_client_span=client,
    )
    for c in STAGES + TTFT_STAGES:
        r[c] = None if (c.endswith("network_ms") and not client) or rng.random() < 0.02 else v()
    r["ttft_ms"] = sum(r[c] or 0 for c in TTFT_STAGES[1:])
    r["e2e_ms"] = sum(r[c] or 0 for c in STAGES[1:])
    r["tpot_ms"] = math.nan if r["output_tokens"] == 1 else v()
    if client:
        r["client_ttft_ms"] = r["ttft_ms"] + (r["ttft_network_ms"] or 0)
        r["client_e2e_ms"] = r["e2e_ms"] + (r["network_ms"] or 0)
        r["client_tpot_ms"] = r["tpot_ms"]
    if rng.random() < 0.01:  # a figure that could not be computed
        r["e2e_ms" if not client else "client_e2e_ms"] = math.nan
    return r


@pytest.fixture(scope="module")
def con():
    rng = random.Random(3)
    rows = (
        [_row(rng, "big", True) for _ in range(3000)]
        + [_row(rng, "small", True) for _ in range(40)]
        + [_row(rng, "flat", False, flat=True) for _ in range(200)]
        + [_row(rng, "server", rng.random() < 0.5) for _ in range(500)]
        + [_row(rng, "other", False) for _ in range(30)]
    )
    c = duckdb.connect()
    for stmt in schema.create_statements():
        c.execute(stmt)
    cols = [col.name for col in schema.REQUESTS.columns]
    c.executemany(
        f"INSERT INTO requests ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
        [[r[k] for k in cols] for r in rows],
    )
    yield c
    c.close()


def _one(con, sql, params=()):
    return con.execute(sql, list(params)).fetchone()


def _close(got, want):
    if want is None or got is None:
        return got is want
    if not isinstance(want, float):
        return got == want
    if math.isnan(want):
        return isinstance(got, float) and math.isnan(got)
    return got == pytest.approx(want, rel=1e-12, abs=1e-12)


def _reference_attribution(con, tier: str, kind: str, with_client: bool, q: float):
    """The attribution of docs/design.md, one plain query per figure."""
    comps = attribution.components(kind, with_client)
    m = attribution.FIGURES[kind][0 if with_client else 1]
    base = f"WHERE tier = ? AND outcome = 'ok' AND {m} IS NOT NULL AND NOT isnan({m})"
    n, tq, med = _one(
        con, f"SELECT count(*), quantile_cont({m}, {q}), quantile_cont({m}, 0.5) FROM requests {base}", [tier]
    )
    if not n:
        return None
    means = ", ".join(f"avg(coalesce({c}, 0))" for c in comps.values())
    (n_tail,) = _one(con, f"SELECT count(*) FROM requests {base} AND {m} >= ?", [tier, tq])
    if n_tail < selection.MIN_TAIL:
        *tail, size, tail_min = _one(
            con,
            f"SELECT {means}, count(*), min({m}) FROM (SELECT * FROM requests {base} "
            f"ORDER BY {m} DESC LIMIT {selection.MIN_TAIL})",
            [tier],
        )
    else:
        *tail, size, tail_min = _one(
            con, f"SELECT {means}, count(*), min({m}) FROM requests {base} AND {m} >= ?", [tier, tq]
        )
    *body, body_size = _one(con, f"SELECT {means}, count(*) FROM requests {base} AND {m} <= ?", [tier, med])
    seps = contrast.separators(con, base, [tier], m, tail_min, med)
    return {
        "metric": m,
        "tail_size": size,
        "tail_widened": n_tail < selection.MIN_TAIL,
        "body_size": body_size,
        "threshold_ms": tq,
        "median_ms": med,
        "tail_min_ms": tail_min,
        "tail_mean_ms": dict(zip(comps, tail)),
        "body_mean_ms": dict(zip(comps, body)),
    }, seps


def test_every_figure_is_its_definition(con):
    budgets = parse_budgets(BUDGETS)
    rep = build_report(con, budgets)
    assert rep["unbudgeted_tiers"] == {"other": 30}
    seen = set()
    for tb, t in zip(budgets.tiers, rep["tiers"]):
        tier = tb.name
        n, ok, client = _one(
            con,
            """SELECT count(*), count(*) FILTER (WHERE outcome = 'ok'),
            count(*) FILTER (WHERE outcome = 'ok' AND has_client_span) FROM requests WHERE tier = ?""",
            [tier],
        )
        assert (t["requests"], t["ok_requests"], t["requests_without_client_span"]) == (n, ok, ok - client)
        assert t["outcomes"] == dict(
            con.execute(
                "SELECT outcome, count(*) FROM requests WHERE tier = ? GROUP BY 1 ORDER BY 1", [tier]
            ).fetchall()
        )
        with_client = ok > 0 and client == ok
        conds = ["outcome = 'ok'"]
        for m in ("ttft_ms", "tpot_ms", "e2e_ms"):
            b = tb.metric_budget(m)
            if b is not None:
                fig = f"CASE WHEN has_client_span THEN {CLIENT_METRIC[m]} ELSE {m} END"
                okc = f"coalesce({fig} <= {b}, false)"
                conds.append(f"(isnan({fig}) OR {okc})" if m == "tpot_ms" else okc)
        (att,) = _one(
            con,
            f"SELECT avg(CASE WHEN {' AND '.join(conds)} THEN 1.0 ELSE 0.0 END) FROM requests WHERE tier = ?",
            [tier],
        )
        assert t["attainment"] == att  # an exact ratio either way
        for name, v in {**t["metrics"], **t["stages"]}.items():
            col = v["column"]
            for p in [k for k in v if k.startswith("p")]:
                (want,) = _one(
                    con,
                    f"SELECT quantile_cont({col}, {float(p[1:]) / 100}) FILTER (WHERE NOT isnan({col})) "
                    "FROM requests WHERE tier = ? AND outcome = 'ok'",
                    [tier],
                )
                assert v[p] == want, (tier, name, p)  # the same aggregate over the same rows: bit for bit
        assert set(t["stages"]) == {s for s in STAGE_COLUMNS if s != "network" or with_client}
        for kind in ("ttft", "e2e"):
            ref = _reference_attribution(con, tier, kind, with_client, tb.percentile / 100)
            got = t["attribution"][kind]
            if ref is None:
                assert got is None and kind not in t["contrast"]
                continue
            want, seps = ref
            for k, w in want.items():
                if isinstance(w, dict):
                    assert all(_close(got[k][s], w[s]) for s in w), (tier, kind, k, got[k], w)
                else:
                    assert _close(got[k], w), (tier, kind, k, got[k], w)
            assert [(s["dimension"], s["value"]) for s in t["contrast"][kind]] == [
                (s["dimension"], s["value"]) for s in seps
            ]
            assert all(_close(a["distance"], b["distance"]) for a, b in zip(t["contrast"][kind], seps))
            seen.add((tier, got["tail_widened"], got["threshold_ms"] <= got["median_ms"]))
    # the edges were met: a widened tail, a quantile at the median, and the plain case
    assert ("small", True, False) in seen and ("flat", False, True) in seen and ("big", False, False) in seen


def test_a_tier_without_requests_and_one_without_ok_requests(con):
    budgets = parse_budgets("[tiers.nobody]\n[tiers.broken]\n")
    con.execute("INSERT INTO requests (trace_id, tier, outcome, e2e_ms) VALUES ('x', 'broken', 'error', 5.0)")
    try:
        nobody, broken = build_report(con, budgets)["tiers"]
    finally:
        con.execute("DELETE FROM requests WHERE trace_id = 'x'")
    assert (
        nobody["requests"] == 0
        and nobody["attainment"] is None
        and nobody["attribution"] == {"ttft": None, "e2e": None}
    )
    assert broken["requests"] == 1 and broken["attainment"] == 0.0 and broken["metrics"]["e2e_ms"][pkey(99.0)] is None


class _Counting:
    """A fake connection for these tests: the real DuckDB connection, with every statement it ran kept."""

    def __init__(self, con):
        self.con, self.statements = con, []

    def execute(self, sql, params=None):
        self.statements.append(sql)
        return self.con.execute(sql, params or [])


OVERLAPPING = """
[tiers.big]
percentile = 99
ttft_ms = 400
[tiers.big-m1]
percentile = 95
match = { tier = "big", model = "m1" }
e2e_ms = 3000
[tiers.server]
percentile = 90
"""


def _json_close(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_json_close(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_json_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return _close(a, b)
    return a == b


def test_tiers_scanned_together_equal_each_tier_alone_even_when_they_overlap(con):
    """A tier's rows are a condition of its own in each shared scan: a tier whose requests are also another
    tier's (big-m1 inside big) is counted whole in both, as when each is reported alone."""
    budgets = parse_budgets(OVERLAPPING)
    together = build_report(con, budgets)["tiers"]
    alone = [tier_report(con, tb) for tb in budgets.tiers]
    assert [t["name"] for t in together] == ["big", "big-m1", "server"]
    assert together[1]["requests"] == _one(con, "SELECT count(*) FROM requests WHERE tier = 'big' AND model = 'm1'")[0]
    assert 0 < together[1]["requests"] < together[0]["requests"]
    for a, b in zip(together, alone):
        assert _json_close(a, b), a["name"]


def test_tiers_in_several_scans_equal_tiers_in_one(con, monkeypatch):
    """Past TIERS_PER_SCAN tiers the report's scans come in batches (issue 37: one statement for ~6,500 tiers raised
    SIGFPE inside DuckDB); a report cut into batches of two is the report of one batch, tier by tier."""
    import budgetscope.analysis.report as report_module

    budgets = parse_budgets(BUDGETS + OVERLAPPING.replace("[tiers.big]", "[tiers.big2]").replace("server", "server2"))
    whole = build_report(con, budgets)
    monkeypatch.setattr(report_module, "TIERS_PER_SCAN", 2)
    counting = _Counting(con)
    cut = build_report(counting, budgets)
    assert len(budgets.tiers) == 8 and len([s for s in counting.statements if "SELECT tier, outcome" in s]) == 4
    assert _json_close(whole, cut)


@pytest.mark.parametrize("tiers", [1, 4])
def test_the_report_scans_requests_three_times_whatever_the_tiers(con, tiers):
    """Counts, quantiles and the tail/body groups: one statement each for up to TIERS_PER_SCAN tiers at once."""
    names = ["big", "small", "flat", "server"][:tiers]
    counting = _Counting(con)
    report = build_report(counting, parse_budgets("".join(f"[tiers.{n}]\n" for n in names)))
    assert [t["name"] for t in report["tiers"]] == names
    scans_of = {
        "counts": [s for s in counting.statements if "SELECT tier, outcome" in s],
        "quantiles": [s for s in counting.statements if "quantile_cont" in s],
        "splits": [s for s in counting.statements if "GROUP BY d0" in s],
    }
    assert {k: len(v) for k, v in scans_of.items()} == {"counts": 1, "quantiles": 1, "splits": 1}


def test_joins_skipped_for_empty_tables_change_nothing(con, monkeypatch):
    """The report skips the engine-step, gauge and unclaimed-span joins when those tables hold nothing
    (coverage.contents); told that they hold rows, it runs the joins and finds the same. (Without GPU samples the
    report says so: that answer is the probe's own, as before.)"""
    budgets = parse_budgets(BUDGETS)
    counting = _Counting(con)
    skipped = build_report(counting, budgets)
    assert not any("gpu_samples g" in s or "engine_steps st" in s or "spans s WHERE" in s for s in counting.statements)
    every = {**dict.fromkeys(coverage.contents(con), True), "gpu_samples": False}
    monkeypatch.setattr(coverage, "contents", lambda c: every)
    counting = _Counting(con)
    joined = build_report(counting, budgets)
    assert any("spans s WHERE" in s for s in counting.statements)
    assert _json_close(skipped, joined)


def test_a_table_an_older_archive_lacks_holds_nothing():
    """An archive written before `server_metrics` existed: the probe counts the missing table as empty (its joins
    are skipped) instead of failing the report."""
    c = duckdb.connect()
    for stmt in schema.create_statements():
        c.execute(stmt)
    c.execute("INSERT INTO spans (trace_id, span_id, name, source) VALUES ('t', 's', 'x', 'other')")
    c.execute("DROP TABLE server_metrics")
    assert coverage.contents(c) == {
        "gpu_samples": False,
        "engine_steps": False,
        "kv_gauges": False,
        "unclaimed": True,
        "violations": False,
        "unread_events": False,
    }
    assert build_report(c, None)["unclaimed_spans"]["total"] == 1
