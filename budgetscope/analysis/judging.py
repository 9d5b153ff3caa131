"""How one request is judged against one budget of its tier: the one place that `report` (attainment, burn rates)
and `collect --budgets` (the live SLI counters on `/metrics`) both take it from, as SQL over `requests` rows.

A tier's budgeted figures are `ttft`, `tpot` and `e2e` (request-level) and each stage with a stage budget
(`queue`, `prefill`, ...). Against each, a request is

- judged unless the client cancelled it (it left, or a benchmark ended with it in flight: neither a success nor a
  failure of the server);
- within the budget when it ended ok and its figure is at most the budget. A failed, rejected or timed-out request
  is judged and is a miss against every budget of its tier.

The figure of a request-level budget is the client's when the request has a client span with it, the server's
otherwise (an OpenTelemetry HTTP client span has no first-token time, derive/requests.py); a stage budget is
compared with the stage's column (the TTFT stages inside the TTFT window). A TPOT that does not exist (NaN: one
output token) meets its budget. Attainment (goodput) is the share of judged requests within every request-level
budget of the tier.
"""

from __future__ import annotations

from budgetscope.analysis.budgets import BUDGETABLE_STAGES, METRICS, TierBudget

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
METRIC_FIGURES = {m.removesuffix("_ms"): m for m in METRICS}
"""Request-level figure name (`ttft`, `tpot`, `e2e`: the `figure` label of the SLI series) → budgets key."""
OK, CANCELLED = "ok", "cancelled"
JUDGED = f"outcome IS DISTINCT FROM '{CANCELLED}'"
"""SQL: the request is judged (every outcome but cancelled; a row without an outcome is judged)."""


def budgeted_figures(tb: TierBudget) -> dict[str, float]:
    """Figure → budget (ms) of every budgeted figure of the tier: `ttft`, `tpot`, `e2e`, then its stages in stage
    order."""
    out = {f: tb.metric_budget(m) for f, m in METRIC_FIGURES.items() if tb.metric_budget(m) is not None}
    out.update({s: tb.stages[s] for s in BUDGETABLE_STAGES if s in tb.stages})
    return out


def value_sql(figure: str) -> str:
    """SQL: the request's value of `figure` (ms) as its budget judges it."""
    if figure in METRIC_FIGURES:
        m = METRIC_FIGURES[figure]
        return f"coalesce({CLIENT_METRIC[m]}, {m})"
    return STAGE_COLUMNS[figure]


def met_sql(figure: str, budget_ms: float) -> str:
    """SQL: the figure is known and within `budget_ms` (true or false, never NULL; a NaN TPOT meets it)."""
    value = value_sql(figure)
    met = f"coalesce({value} <= {budget_ms}, false)"
    return f"(isnan({value}) OR {met})" if figure == "tpot" else met


def judged_sql(tb: TierBudget, figure: str) -> str:
    """SQL: the request is judged against the tier's budget of `figure`."""
    return JUDGED


def within_sql(tb: TierBudget, figure: str) -> str:
    """SQL: the request is judged and within the tier's budget of `figure` (it ended ok)."""
    return f"outcome = '{OK}' AND {met_sql(figure, budgeted_figures(tb)[figure])}"


def attainment_sql(tb: TierBudget | None) -> str:
    """SQL: the request ended ok and met every request-level budget of the tier (None: no budget but ending ok)."""
    conds = [f"outcome = '{OK}'"]
    if tb is not None:
        conds += [met_sql(f, b) for f, b in budgeted_figures(tb).items() if f in METRIC_FIGURES]
    return " AND ".join(conds)


__all__ = [
    "CLIENT_METRIC",
    "STAGE_COLUMNS",
    "METRIC_FIGURES",
    "JUDGED",
    "budgeted_figures",
    "value_sql",
    "met_sql",
    "judged_sql",
    "within_sql",
    "attainment_sql",
]
