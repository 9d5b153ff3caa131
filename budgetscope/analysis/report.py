"""The budget report: per tier, percentiles against budgets, stage quantiles, attainment, tail attribution,
what separates the tail from the body, and a verdict in plain English.

`build_report(con, budgets)` returns the report JSON of docs/design.md as a dict (keys are stable: add, never rename).
Latency figures and attribution use the tier's requests whose outcome is `ok` (labelled so: `percentiles_over`).
Attainment and the error rate count every request of the tier but those the client cancelled: a failed, rejected
or timed-out request misses every SLO of its tier. Each tier gets a status (`KEPT`, `BROKEN` or `UNKNOWN`, with
the reason) and the report the worst of them (docs/report.md).
"""

from __future__ import annotations

import budgetscope.analysis.attribution as attribution
import budgetscope.analysis.contrast as contrast
import budgetscope.analysis.coverage as coverage
from budgetscope.analysis.budgets import METRICS, Budgets, TierBudget
from budgetscope.analysis.gpu import tail_gpu
from budgetscope.analysis.queue_wait import tail_queue_wait
from budgetscope.analysis.selection import BODY, FILTER_COLUMNS, TAIL, Selection, slowest, split_class, widened
from budgetscope.analysis.verdict import verdict
from budgetscope.derive.client import FIRST_TOKEN_DEFINITION, TOKEN_EVENT

PERCENTILES = (50.0, 90.0, 95.0, 99.0)
CLIENT_METRIC = {"ttft_ms": "client_ttft_ms", "tpot_ms": "client_tpot_ms", "e2e_ms": "client_e2e_ms"}
STAGE_COLUMNS = {  # stage → column compared with its stage budget (the TTFT stages inside the TTFT window)
    "network": "ttft_network_ms",
    "frontend": "ttft_frontend_ms",
    "queue": "ttft_queue_ms",
    "prefill": "ttft_prefill_ms",
    "decode": "decode_ms",
    "postprocess": "postprocess_ms",
    "unaccounted": "unaccounted_ms",
}


def pkey(p: float) -> str:
    """99.0 → "p99", 99.9 → "p99.9"."""
    return f"p{p:g}"


def _rows(con, sql: str, params) -> list[tuple]:
    return con.execute(sql, params).fetchall()


def _nan_to_none(x):
    return None if x is None or x != x else x


def _attainment_condition(tb: TierBudget | None) -> str:
    """A request that ended ok and met every request-level SLO (the client figure when the request has it,
    the server figure otherwise: an HTTP client span has no client TTFT, derive/requests.py)."""
    conds = ["outcome = 'ok'"]
    if tb is not None:
        for m in METRICS:
            b = tb.metric_budget(m)
            if b is None:
                continue
            fig = f"coalesce({CLIENT_METRIC[m]}, {m})"
            ok = f"coalesce({fig} <= {b}, false)"
            conds.append(f"(isnan({fig}) OR {ok})" if m == "tpot_ms" else ok)
    return " AND ".join(conds)


OK, CANCELLED = "ok", "cancelled"
"""A cancelled request is the client's choice (it left, or a benchmark ended with it in flight): it is neither
a success nor a failure of the server, so attainment and the error rate leave it out. Every other outcome
that is not ok (error, rejected, timeout) is a failure."""


def _counts(con, sel: Selection, tb: TierBudget | None) -> dict:
    """Requests by outcome, those with a client span, those with a server TTFT (E2E) but no client one,
    attainment and the error rate (None without a request that is not cancelled), and the ok requests with a
    client span by the client's first-token definition (None: a row written before the column): one scan."""
    rows = _rows(
        con,
        f"""
        SELECT outcome, client_first_token_definition, count(*), count_if(has_client_span),
               count_if({_attainment_condition(tb)}), count_if(client_ttft_ms IS NULL AND ttft_ms IS NOT NULL),
               count_if(client_e2e_ms IS NULL AND e2e_ms IS NOT NULL)
        FROM requests {sel.where()} GROUP BY 1, 2 ORDER BY 1""",
        sel.params,
    )
    n = sum(r[2] for r in rows)
    ok_rows = [r for r in rows if r[0] == OK]
    ok = sum(r[2] for r in ok_rows)
    judged = n - sum(r[2] for r in rows if r[0] == CANCELLED)
    outcomes: dict[str, int] = {}
    for r in rows:
        outcomes[r[0]] = outcomes.get(r[0], 0) + r[2]
    # the share of the judged requests that attained: exactly avg(1.0 if attained else 0.0), as an exact ratio
    met = sum(r[4] for r in rows)
    return {
        "n": n,
        "ok": ok,
        "judged": judged,
        "client": sum(r[3] for r in ok_rows),
        "server_only": {"ttft": sum(r[5] for r in ok_rows), "e2e": sum(r[6] for r in ok_rows)},
        "outcomes": outcomes,
        "attainment": met / judged if judged else None,
        "error_rate": (judged - ok) / judged if judged else None,
        "definitions": {r[1]: r[3] for r in ok_rows if r[3]},
    }


TTFT_DEFINITIONS = {"first_token_event": "first token event", "first_nonempty_chunk": "first non-empty chunk"}
"""How a client counted its first token (client span `budgetscope.client.first_token_definition`; budgetscope's
own client writes none: the first token event, its text possibly empty). AIPerf and GuideLLM wait for non-empty
text, which comes later on a server that streams a token's bytes before they decode."""


def _ttft_definitions(con, sel: Selection, stored: dict[str | None, int]) -> dict[str, int]:
    """How the selection's ok requests' client TTFTs were measured: definition → requests. `stored` is the count
    by the rows' own column (`_counts`); rows written before it (None) read their client span's attribute."""
    found = {d: n for d, n in stored.items() if d is not None}
    if None in stored:
        # `r` is read once and the JSON parsed only for the spans joined (Spark ran a CTE read twice twice, and
        # parsed every client span's attributes)
        where = sel.where("outcome = 'ok'", "has_client_span", "client_first_token_definition IS NULL")
        for d, n in _rows(
            con,
            f"""
            WITH r AS (SELECT trace_id, client_span_id FROM requests {where})
            SELECT coalesce(c.attributes->>'{FIRST_TOKEN_DEFINITION}', '{TOKEN_EVENT}'), count(*)
            FROM r JOIN spans c ON c.trace_id = r.trace_id AND c.span_id = r.client_span_id
            WHERE c.source = 'client' GROUP BY 1""",
            sel.params,
        ):
            found[d] = found.get(d, 0) + n
    return {TTFT_DEFINITIONS.get(d, d): found[d] for d in sorted(found)}


def _valid(col: str) -> str:
    """The column with NaN as NULL, which aggregates leave out (cheaper than a FILTER clause)."""
    return f"nullif({col}, 'NaN'::DOUBLE)"


def _quantile_expr(col: str, pcts: list[float]) -> str:
    return f"quantile_cont({_valid(col)}, {[p / 100 for p in pcts]})"


def _quantiles(
    con, sel: Selection, groups: list[tuple[dict[str, str], list[float]]], splits: dict[str, tuple[str, float]]
) -> tuple[list[dict[str, dict[str, float | None]]], dict]:
    """One scan of the selection's ok requests (NaN and NULL left out of every figure) for:

    - each group (columns name → column, percentiles): name → {pXX: value};
    - each split (kind → (metric column, percentile)): (requests with the metric, its quantile, its median),
      the attribution's tail and body boundaries. A group that has the column at both percentiles gives them
      (the same aggregate over the same rows)."""
    exprs: list[str] = []
    at: dict[str, int] = {}

    def agg(sql: str) -> int:  # the position of an aggregate in the row, each computed once
        if sql not in at:
            at[sql] = len(exprs)
            exprs.append(sql)
        return at[sql]

    group_at = [[(name, agg(_quantile_expr(col, pcts))) for name, col in columns.items()] for columns, pcts in groups]
    split_at = {}
    for kind, (col, pct) in splits.items():
        pcts = next(
            (pcts for columns, pcts in groups if col in columns.values() and pct in pcts and 50.0 in pcts), [pct, 50.0]
        )
        split_at[kind] = (
            agg(f"count({_valid(col)})"),
            agg(_quantile_expr(col, pcts)),
            pcts.index(pct),
            pcts.index(50.0),
        )
    ok = sel.where("outcome = 'ok'")
    (row,) = _rows(con, f"SELECT {', '.join(exprs)} FROM requests {ok}", sel.params)
    out = []
    for (columns, pcts), positions in zip(groups, group_at):
        figures = {}
        for name, i in positions:
            values = row[i]
            figures[name] = {
                pkey(p): (_nan_to_none(v) if values is not None else None)
                for p, v in zip(pcts, values or [None] * len(pcts))
            }
        out.append(figures)
    bounds = {}
    for kind, (n_at, i, qi, mi) in split_at.items():
        values = row[i]
        bounds[kind] = (row[n_at], values[qi], values[mi]) if values is not None else (row[n_at], None, None)
    return out, bounds


def _attributions(con, sel: Selection, client_for: dict[str, bool], bounds: dict) -> dict:
    """kind → the attribution of its tail (None without requests): tail T = metric ≥ its quantile (the MIN_TAIL
    slowest when that is fewer), body B = metric ≤ its median. Every kind's T and B from one scan, grouped by
    the kinds' classes; a mean is the sum of its groups' sums over the sum of their counts."""
    plan = {}
    for kind, (n, tq, med) in bounds.items():
        if n:
            plan[kind] = (
                attribution.components(kind, client_for[kind]),
                attribution.FIGURES[kind][0 if client_for[kind] else 1],
                tq,
                med,
            )
    out = {kind: None for kind in bounds}
    if not plan:
        return out
    classes = [split_class(metric, "?", "?") for _, metric, _, _ in plan.values()]
    params = [x for _, _, tq, med in plan.values() for x in (tq, med, tq, med)]
    mins = [f"min({metric})" for _, metric, _, _ in plan.values()]
    sums = [f"sum(coalesce({c}, 0))" for comps, _, _, _ in plan.values() for c in comps.values()]
    ok = sel.where("outcome = 'ok'")
    names = ", ".join(f"c{j}" for j in range(len(plan)))
    rows = _rows(
        con,
        f"""SELECT {names}, count(*), {", ".join(mins + sums)}
        FROM (SELECT *, {", ".join(f"{c} AS c{j}" for j, c in enumerate(classes))} FROM requests {ok})
        GROUP BY {names}""",
        [*params, *sel.params],
    )
    k, at = len(plan), len(plan) + 1 + len(plan)
    for j, (kind, (comps, metric, tq, med)) in enumerate(plan.items()):
        tail = [r for r in rows if r[j] in TAIL]
        body = [r for r in rows if r[j] in BODY]
        cols = range(at, at + len(comps))
        at += len(comps)
        n_tail, n_body = sum(r[k] for r in tail), sum(r[k] for r in body)
        is_widened = widened(n_tail)
        if is_widened:
            means = ", ".join(f"avg(coalesce({c}, 0))" for c in comps.values())
            *tail_vals, tail_size, tail_min = slowest(con, sel, metric, f"{means}, count(*), min({metric})")
        else:
            tail_vals = [sum(r[i] for r in tail) / n_tail for i in cols]
            tail_size, tail_min = n_tail, min(r[k + 1 + j] for r in tail)
        body_vals = [sum(r[i] for r in body) / n_body if n_body else None for i in cols]
        tail_mean = dict(zip(comps, tail_vals))
        body_mean = dict(zip(comps, body_vals))
        sh = attribution.shares(tail_mean, body_mean)
        out[kind] = {
            "metric": metric,
            "tail_size": tail_size,
            "tail_widened": is_widened,
            "body_size": n_body,
            "threshold_ms": tq,
            "median_ms": med,
            "tail_min_ms": tail_min,
            "shares": sh.shares,
            "dominant": sh.dominant,
            "verdict": sh.verdict,
            "top": sh.top,
            "tail_mean_ms": tail_mean,
            "body_mean_ms": body_mean,
        }
    return out


def tier_report(
    con,
    tb: TierBudget,
    since_ns: int | None = None,
    until_ns: int | None = None,
    budgeted: bool = True,
    filters: dict | None = None,
) -> dict:
    """The report entry of one tier; `filters` (see `Selection`) narrow its requests further.

    Four scans of the tier's requests, whatever the budgets: counts (and attainment), quantiles, the tail and
    body means of the attribution, and the contrast of tail and body."""
    sel = Selection(tb.filters, since_ns, until_ns, filters)
    counts = _counts(con, sel, tb if budgeted else None)
    pcts = sorted(set(PERCENTILES) | {tb.percentile})
    with_client = counts["ok"] > 0 and counts["client"] == counts["ok"]
    # per kind, client figures unless a request has the server's figure but not the client's: an OpenTelemetry
    # HTTP client span carries no first-token time, nor (a streamed response) the response's end
    client_for = {k: with_client and not counts["server_only"][k] for k in ("ttft", "e2e")}
    entry: dict = {
        "name": tb.name,
        "match": tb.match,
        "requests": counts["n"],
        "ok_requests": counts["ok"],
        "judged_requests": counts["judged"],
        "outcomes": counts["outcomes"],
        "percentile": tb.percentile,
        "budgeted": budgeted,
        "percentiles_over": "ok requests",
        "error_rate": counts["error_rate"],
        "max_error_rate": tb.error_budget(),
        "max_error_rate_declared": tb.max_error_rate is not None,
        "figures": "client" if all(client_for.values()) else "server",
        "figures_by_kind": {k: "client" if c else "server" for k, c in client_for.items()},
        "requests_without_client_span": counts["ok"] - counts["client"],
        "client_ttft_definitions": _ttft_definitions(con, sel, counts["definitions"]) if with_client else {},
    }
    client_metric = {"ttft_ms": client_for["ttft"], "tpot_ms": all(client_for.values()), "e2e_ms": client_for["e2e"]}
    fig_cols = {m: (CLIENT_METRIC[m] if client_metric[m] else m) for m in METRICS}
    stage_cols = {s: c for s, c in STAGE_COLUMNS.items() if s != "network" or client_for["ttft"]}
    stage_pcts = sorted({50.0, tb.percentile})
    if counts["ok"]:
        splits = {
            kind: (attribution.FIGURES[kind][0 if client_for[kind] else 1], tb.percentile) for kind in ("ttft", "e2e")
        }
        (metric_q, stage_q), bounds = _quantiles(con, sel, [(fig_cols, pcts), (stage_cols, stage_pcts)], splits)
        attributed = _attributions(con, sel, client_for, bounds)
    else:
        metric_q = {m: {pkey(p): None for p in pcts} for m in METRICS}
        stage_q = {s: {pkey(p): None for p in stage_pcts} for s in stage_cols}
        attributed = {"ttft": None, "e2e": None}
    entry["metrics"] = {m: {**metric_q[m], "column": fig_cols[m], "budget": tb.metric_budget(m)} for m in METRICS}
    entry["stages"] = {s: {**stage_q[s], "column": stage_cols[s], "budget": tb.stages.get(s)} for s in stage_cols}
    entry["attainment"] = counts["attainment"]
    entry["attribution"] = attributed
    entry["contrast"] = {}
    splits = {kind: (a["metric"], a["tail_min_ms"], a["median_ms"]) for kind, a in attributed.items() if a is not None}
    if splits:
        found = contrast.separators_of_splits(con, sel.where("outcome = 'ok'"), sel.params, splits)
        entry["contrast"] = {kind: found[kind] for kind in ("ttft", "e2e") if kind in found}
    entry["gpu"] = tail_gpu(con, sel, entry) if counts["ok"] else None
    entry["queue_wait"] = tail_queue_wait(con, sel, entry) if counts["ok"] else None
    entry["breaches"] = breaches(entry)
    entry["unknown_reason"] = None if entry["breaches"] else unknown_reason(entry)
    entry["status"] = BROKEN if entry["breaches"] else UNKNOWN if entry["unknown_reason"] else KEPT
    if entry["status"] == UNKNOWN:
        entry["attainment"] = None  # requests whose figures are unknown neither met nor missed their SLOs
    entry["kept"] = entry["status"] == KEPT
    entry["verdict"] = verdict(entry)
    return entry


KEPT, UNKNOWN, BROKEN = "KEPT", "UNKNOWN", "BROKEN"
STATUSES = (KEPT, UNKNOWN, BROKEN)
"""A tier's status, from best to worst: the report's status is its tiers' worst."""


def breaches(entry: dict) -> list[dict]:
    """Every budget the tier breaks: its error rate over `max_error_rate`; request-level metrics and stages
    whose quantile (over ok requests) exceeds the budget; and attainment 0 % under latency budgets whose
    figures are known (no request met every SLO), so that the status never contradicts the attainment."""
    key = pkey(entry["percentile"])
    out = []
    rate, allowed = entry["error_rate"], entry["max_error_rate"]
    if rate is not None and rate > allowed:
        out.append(
            {
                "kind": "error_rate",
                "name": "max_error_rate",
                "value": rate,
                "budget": allowed,
                "declared": entry["max_error_rate_declared"],
            }
        )
    for group, items in (("metric", entry["metrics"]), ("stage", entry["stages"])):
        for name, v in items.items():
            if v["budget"] is not None and v[key] is not None and v[key] > v["budget"]:
                out.append({"kind": group, "name": name, "value": v[key], "budget": v["budget"], "quantile": key})
    budgeted = [v for v in entry["metrics"].values() if v["budget"] is not None]
    # with a budgeted figure unknown, attainment 0 % says nothing: the tier is UNKNOWN, not broken by it
    if budgeted and all(v[key] is not None for v in budgeted) and entry["attainment"] == 0:
        out.append({"kind": "attainment", "name": "attainment", "value": 0.0, "budget": entry["percentile"] / 100})
    return out


def unknown_reason(entry: dict) -> str | None:
    """Why the tier's figures cannot be judged, or None when they can: no request at all, or a budgeted
    metric that no ok request has a value of (its quantile is unknown)."""
    if not entry["requests"]:
        return "no request matched this tier"
    if not entry["judged_requests"]:
        return f"all {entry['requests']:,} requests were cancelled by their clients"
    if not entry["ok_requests"]:
        return f"none of its {entry['judged_requests']:,} requests ended ok, so no latency was measured"
    key = pkey(entry["percentile"])
    budgeted = [m for m, v in entry["metrics"].items() if v["budget"] is not None]
    unknown = [m for m in budgeted if entry["metrics"][m][key] is None]
    latency = ("ttft_ms", "e2e_ms")
    if not budgeted and all(entry["metrics"][m][key] is None for m in latency):
        unknown = list(latency)  # without budgets, a tier still needs some latency to be read
    if not unknown:
        return None
    names = ", ".join(m.removesuffix("_ms").upper() for m in unknown)
    return (
        f"no ok request has a known {names} (of {entry['ok_requests']:,} ok requests): the spans were "
        "read but carry no such timing"
    )


def discovered_tiers(con) -> list[str]:
    return [t for (t,) in con.execute("SELECT DISTINCT tier FROM requests ORDER BY 1").fetchall()]


def tier_selected(tb: TierBudget, filters: dict | None) -> bool:
    """Whether a `tier` filter (a value or a list of values) keeps this tier in the report."""
    if not filters or "tier" not in filters:
        return True
    want = filters["tier"]
    return tb.filters["tier"] in ([want] if want is None or isinstance(want, str) else list(want))


def _tier_reports(con, jobs: list[tuple[TierBudget, bool]], since_ns, until_ns, filters) -> list[dict]:
    """`tier_report` of each (tier, budgeted), in order; several tiers at once, each on its own cursor, as many as
    DuckDB has threads (docs/benchmarks.md, "Tiers in parallel")."""

    def one(c, tb: TierBudget, budgeted: bool) -> dict:
        return tier_report(c, tb, since_ns, until_ns, budgeted=budgeted, filters=filters)

    workers = min(len(jobs), _threads(con))
    if workers < 2:
        return [one(con, tb, b) for tb, b in jobs]

    def on_cursor(job: tuple[TierBudget, bool]) -> dict:
        cur = con.cursor()
        try:
            return one(cur, *job)
        finally:
            cur.close()

    # imported on use: concurrent.futures 92 ms to import
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers, thread_name_prefix="budgetscope-report") as pool:
        return list(pool.map(on_cursor, jobs))


def _threads(con) -> int:
    """DuckDB's threads, a Spark connection's `threads` (jobs it runs at once), or 1 for a connection that has no
    cursors to share out."""
    if getattr(con, "threads", None):
        return con.threads
    if not hasattr(con, "cursor"):
        return 1
    try:
        return int(con.execute("SELECT current_setting('threads')").fetchone()[0])
    except Exception:  # noqa: BLE001 - not a DuckDB connection: one tier at a time
        return 1


def build_report(
    con,
    budgets: Budgets | None = None,
    since_ns: int | None = None,
    until_ns: int | None = None,
    filters: dict | None = None,
) -> dict:
    """The whole report. Without budgets, every tier found is reported at p99 with no budget.

    `filters` (column in FILTER_COLUMNS → value or list of values, None = NULL) narrow every tier's requests;
    a `tier` filter also leaves out the tiers it excludes. The report then carries a `filters` key.
    """
    if budgets is None:
        jobs = [(tb, False) for tb in (TierBudget(name=t) for t in discovered_tiers(con)) if tier_selected(tb, filters)]
    else:
        jobs = [(tb, True) for tb in budgets.tiers if tier_selected(tb, filters)]
    tiers = _tier_reports(con, jobs, since_ns, until_ns, filters)
    unbudgeted = {}
    sel = Selection({}, since_ns, until_ns, filters)
    if budgets is not None:
        named = {tb.match.get("tier", tb.name) for tb in budgets.tiers}
        unbudgeted = {
            t: n
            for t, n in _rows(
                con, f"SELECT tier, count(*) FROM requests {sel.where()} GROUP BY 1 ORDER BY 1", sel.params
            )
            if t not in named
        }
    covered = coverage.coverage(con, sel.where(), sel.params)
    spans = coverage.span_count(con, since_ns, until_ns)
    unclaimed = coverage.unclaimed_spans(con, since_ns, until_ns)
    status, reason = report_status(tiers, spans, unclaimed)
    whole = Selection({}, since_ns, until_ns)  # the warning is about the window, whatever the filters
    derived = (
        covered["requests"] if filters is None else coverage.coverage(con, whole.where(), whole.params)["requests"]
    )
    warning = coverage.nothing_derived_warning(spans, derived, unclaimed)
    out = {
        "tiers": tiers,
        "unbudgeted_tiers": unbudgeted,
        "kept": status == KEPT,
        "status": status,
        "unknown_reason": reason,
        "budgets_file": budgets.path if budgets else None,
        "coverage": covered,
        "spans": spans,
        "unclaimed_spans": unclaimed,
        "warnings": [warning] if warning else [],
    }
    if filters is not None:
        out["filters"] = filters
    return out


def report_status(tiers: list[dict], spans: int, unclaimed: dict) -> tuple[str, str | None]:
    """The report's status (its tiers' worst) and, when UNKNOWN, why. With no tier at all there is nothing to
    judge: UNKNOWN, never KEPT."""
    if not tiers:
        if spans and unclaimed["total"]:
            return (
                UNKNOWN,
                f"no request was derived from the archive's {spans:,} spans ({coverage.unclaimed_line(unclaimed)})",
            )
        return UNKNOWN, "no request to judge" + (f" among {spans:,} spans" if spans else ": the archive holds no spans")
    status = max((t["status"] for t in tiers), key=STATUSES.index)
    reasons = [f"tier {t['name']}: {t['unknown_reason']}" for t in tiers if t["status"] == UNKNOWN]
    return status, ("; ".join(reasons) if status == UNKNOWN else None)


__all__ = [
    "build_report",
    "tier_report",
    "breaches",
    "unknown_reason",
    "report_status",
    "KEPT",
    "UNKNOWN",
    "BROKEN",
    "pkey",
    "tier_selected",
    "Selection",
    "FILTER_COLUMNS",
]
