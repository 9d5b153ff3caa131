"""The budget report: per tier, percentiles against budgets, stage quantiles, attainment, tail attribution,
what separates the tail from the body, and a verdict in plain English.

`build_report(con, budgets)` returns the DESIGN report JSON as a dict (keys are stable: add, never rename).
Latency figures and attribution use the tier's requests whose outcome is `ok`; attainment counts every
request of the tier, and a request that did not end `ok` misses its SLOs.
"""

from __future__ import annotations

from budgetscope.analysis import attribution, contrast
from budgetscope.analysis.budgets import METRICS, Budgets, TierBudget
from budgetscope.analysis.verdict import verdict

PERCENTILES = (50.0, 90.0, 95.0, 99.0)
CLIENT_METRIC = {"ttft_ms": "client_ttft_ms", "tpot_ms": "client_tpot_ms", "e2e_ms": "client_e2e_ms"}
STAGE_COLUMNS = {  # stage → column compared with its stage budget (the TTFT stages inside the TTFT window)
    "network": "ttft_network_ms", "frontend": "ttft_frontend_ms", "queue": "ttft_queue_ms",
    "prefill": "ttft_prefill_ms", "decode": "decode_ms", "postprocess": "postprocess_ms",
    "unaccounted": "unaccounted_ms",
}


def pkey(p: float) -> str:
    """99.0 → "p99", 99.9 → "p99.9"."""
    return f"p{p:g}"


FILTER_COLUMNS = ("tier", "model", "tenant", "service_name")
"""Columns a report (and the dashboard) may be narrowed by, besides the time range."""


class Selection:
    """The requests of one tier (and optional time range and filters), as a SQL WHERE clause with its parameters.

    `extra` narrows further: column (one of FILTER_COLUMNS) → a value or a list of values, None meaning NULL.
    """

    def __init__(self, filters: dict[str, str], since_ns: int | None = None, until_ns: int | None = None,
                 extra: dict | None = None):
        self.clauses = [f"{col} = ?" for col in filters]
        self.params: list = list(filters.values())
        for col, want in (extra or {}).items():
            if col not in FILTER_COLUMNS:
                raise ValueError(f"cannot filter requests by {col!r} (expected one of: {', '.join(FILTER_COLUMNS)})")
            values = [want] if want is None or isinstance(want, str) else list(want)
            named = [v for v in values if v is not None]
            alts = [f"{col} IN ({', '.join('?' * len(named))})"] if named else []
            alts += [f"{col} IS NULL"] if None in values else []
            self.clauses.append("(" + " OR ".join(alts) + ")" if alts else "false")
            self.params.extend(named)
        if since_ns is not None:
            self.clauses.append("arrival_ns >= ?")
            self.params.append(since_ns)
        if until_ns is not None:
            self.clauses.append("arrival_ns < ?")
            self.params.append(until_ns)

    def where(self, *extra: str) -> str:
        parts = self.clauses + list(extra)
        return "WHERE " + " AND ".join(parts) if parts else ""


def _rows(con, sql: str, params) -> list[tuple]:
    return con.execute(sql, params).fetchall()


def _nan_to_none(x):
    return None if x is None or x != x else x


def _counts(con, sel: Selection) -> dict:
    (n, n_ok, n_client), = _rows(con, f"""
        SELECT count(*), count(*) FILTER (WHERE outcome = 'ok'),
               count(*) FILTER (WHERE outcome = 'ok' AND has_client_span) FROM requests {sel.where()}""", sel.params)
    outcomes = dict(_rows(con, f"SELECT outcome, count(*) FROM requests {sel.where()} GROUP BY 1 ORDER BY 1", sel.params))
    return {"n": n, "ok": n_ok, "client": n_client, "outcomes": outcomes}


def _quantiles(con, sel: Selection, columns: dict[str, str], pcts: list[float]) -> dict[str, dict[str, float | None]]:
    """name → {pXX: value} for each column, over ok requests (NaN and NULL left out)."""
    qs = [p / 100 for p in pcts]
    exprs = ", ".join(f"quantile_cont({col}, {qs}) FILTER (WHERE NOT isnan({col}))" for col in columns.values())
    ok = sel.where("outcome = 'ok'")
    (row,) = _rows(con, f"SELECT {exprs} FROM requests {ok}", sel.params)
    out = {}
    for name, values in zip(columns, row):
        out[name] = {pkey(p): (_nan_to_none(v) if values is not None else None)
                     for p, v in zip(pcts, values or [None] * len(pcts))}
    return out


def _attainment(con, sel: Selection, tb: TierBudget | None) -> float | None:
    """Share of the tier's requests that ended ok and met every request-level SLO (client figure when the
    request has a client span, server figure otherwise)."""
    conds = ["outcome = 'ok'"]
    if tb is not None:
        for m in METRICS:
            b = tb.metric_budget(m)
            if b is None:
                continue
            fig = f"CASE WHEN has_client_span THEN {CLIENT_METRIC[m]} ELSE {m} END"
            ok = f"coalesce({fig} <= {b}, false)"
            conds.append(f"(isnan({fig}) OR {ok})" if m == "tpot_ms" else ok)
    (row,) = _rows(con, f"SELECT avg(CASE WHEN {' AND '.join(conds)} THEN 1.0 ELSE 0.0 END) FROM requests {sel.where()}",
                   sel.params)
    return row[0]


def _attribute(con, sel: Selection, kind: str, with_client: bool, q: float) -> dict | None:
    comps = attribution.components(kind, with_client)
    metric = attribution.FIGURES[kind][0 if with_client else 1]
    base = sel.where("outcome = 'ok'", f"{metric} IS NOT NULL", f"NOT isnan({metric})")
    (n, tq, med), = _rows(con, f"SELECT count(*), quantile_cont({metric}, {q}), quantile_cont({metric}, 0.5) "
                               f"FROM requests {base}", sel.params)
    if not n:
        return None
    means = ", ".join(f"avg(coalesce({c}, 0))" for c in comps.values())
    (n_tail,), = _rows(con, f"SELECT count(*) FROM requests {base} AND {metric} >= ?", [*sel.params, tq])
    widened = n_tail < attribution.MIN_TAIL
    if widened:
        tail_sql = (f"SELECT {means}, count(*), min({metric}) FROM (SELECT * FROM requests {base} "
                    f"ORDER BY {metric} DESC LIMIT {attribution.MIN_TAIL})")
        tail_params = sel.params
    else:
        tail_sql = f"SELECT {means}, count(*), min({metric}) FROM requests {base} AND {metric} >= ?"
        tail_params = [*sel.params, tq]
    (*tail_vals, tail_size, tail_min), = _rows(con, tail_sql, tail_params)
    (*body_vals, body_size), = _rows(con, f"SELECT {means}, count(*) FROM requests {base} AND {metric} <= ?",
                                     [*sel.params, med])
    tail_mean = dict(zip(comps, tail_vals))
    body_mean = dict(zip(comps, body_vals))
    sh = attribution.shares(tail_mean, body_mean)
    return {
        "metric": metric, "tail_size": tail_size, "tail_widened": widened, "body_size": body_size,
        "threshold_ms": tq, "median_ms": med, "tail_min_ms": tail_min,
        "shares": sh.shares, "dominant": sh.dominant, "verdict": sh.verdict, "top": sh.top,
        "tail_mean_ms": tail_mean, "body_mean_ms": body_mean,
        "_split": (base, sel.params, metric, tail_min, med),
    }


def tier_report(con, tb: TierBudget, since_ns: int | None = None, until_ns: int | None = None,
                budgeted: bool = True, filters: dict | None = None) -> dict:
    """The report entry of one tier; `filters` (see `Selection`) narrow its requests further."""
    sel = Selection(tb.filters, since_ns, until_ns, filters)
    counts = _counts(con, sel)
    pcts = sorted(set(PERCENTILES) | {tb.percentile})
    with_client = counts["ok"] > 0 and counts["client"] == counts["ok"]
    entry: dict = {
        "name": tb.name, "match": tb.match, "requests": counts["n"], "ok_requests": counts["ok"],
        "outcomes": counts["outcomes"], "percentile": tb.percentile, "budgeted": budgeted,
        "figures": "client" if with_client else "server",
        "requests_without_client_span": counts["ok"] - counts["client"],
    }
    fig_cols = {m: (CLIENT_METRIC[m] if with_client else m) for m in METRICS}
    metric_q = _quantiles(con, sel, fig_cols, pcts) if counts["ok"] else {m: {pkey(p): None for p in pcts} for m in METRICS}
    entry["metrics"] = {m: {**metric_q[m], "column": fig_cols[m], "budget": tb.metric_budget(m)} for m in METRICS}
    stage_cols = {s: c for s, c in STAGE_COLUMNS.items() if s != "network" or with_client}
    stage_pcts = sorted({50.0, tb.percentile})
    stage_q = _quantiles(con, sel, stage_cols, stage_pcts) if counts["ok"] else {s: {pkey(p): None for p in stage_pcts} for s in stage_cols}
    entry["stages"] = {s: {**stage_q[s], "column": stage_cols[s], "budget": tb.stages.get(s)} for s in stage_cols}
    entry["attainment"] = _attainment(con, sel, tb if budgeted else None) if counts["n"] else None
    q = tb.percentile / 100
    entry["attribution"] = {}
    entry["contrast"] = {}
    for kind in ("ttft", "e2e"):
        a = _attribute(con, sel, kind, with_client, q) if counts["ok"] else None
        if a is not None:
            entry["contrast"][kind] = contrast.separators(con, *a.pop("_split"))
        entry["attribution"][kind] = a
    from budgetscope.analysis.gpu import tail_gpu

    entry["gpu"] = tail_gpu(con, sel, entry) if counts["ok"] else None
    entry["breaches"] = breaches(entry)
    entry["kept"] = not entry["breaches"]
    entry["verdict"] = verdict(entry)
    return entry


def breaches(entry: dict) -> list[dict]:
    """Every budget the tier's quantile exceeds: request-level metrics, then stages."""
    key = pkey(entry["percentile"])
    out = []
    for group, items in (("metric", entry["metrics"]), ("stage", entry["stages"])):
        for name, v in items.items():
            if v["budget"] is not None and v[key] is not None and v[key] > v["budget"]:
                out.append({"kind": group, "name": name, "value": v[key], "budget": v["budget"], "quantile": key})
    return out


def discovered_tiers(con) -> list[str]:
    return [t for (t,) in con.execute("SELECT DISTINCT tier FROM requests ORDER BY 1").fetchall()]


def tier_selected(tb: TierBudget, filters: dict | None) -> bool:
    """Whether a `tier` filter (a value or a list of values) keeps this tier in the report."""
    if not filters or "tier" not in filters:
        return True
    want = filters["tier"]
    return tb.filters["tier"] in ([want] if want is None or isinstance(want, str) else list(want))


def build_report(con, budgets: Budgets | None = None, since_ns: int | None = None,
                 until_ns: int | None = None, filters: dict | None = None) -> dict:
    """The whole report. Without budgets, every tier found is reported at p99 with no budget.

    `filters` (column in FILTER_COLUMNS → value or list of values, None = NULL) narrow every tier's requests;
    a `tier` filter also leaves out the tiers it excludes. The report then carries a `filters` key.
    """
    if budgets is None:
        found = [TierBudget(name=t) for t in discovered_tiers(con)]
        tiers = [tier_report(con, tb, since_ns, until_ns, budgeted=False, filters=filters)
                 for tb in found if tier_selected(tb, filters)]
        unbudgeted = {}
    else:
        tiers = [tier_report(con, tb, since_ns, until_ns, filters=filters) for tb in budgets.tiers
                 if tier_selected(tb, filters)]
        named = {tb.match.get("tier", tb.name) for tb in budgets.tiers}
        sel = Selection({}, since_ns, until_ns, filters)
        unbudgeted = {t: n for t, n in _rows(con, f"SELECT tier, count(*) FROM requests {sel.where()} "
                                                  "GROUP BY 1 ORDER BY 1", sel.params) if t not in named}
    out = {
        "tiers": tiers,
        "unbudgeted_tiers": unbudgeted,
        "kept": all(t["kept"] for t in tiers),
        "budgets_file": budgets.path if budgets else None,
    }
    if filters is not None:
        out["filters"] = filters
    return out


__all__ = ["build_report", "tier_report", "breaches", "pkey", "tier_selected", "Selection", "FILTER_COLUMNS"]
