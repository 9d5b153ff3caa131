"""How one request is judged against its tier's budgets: the one place that `report` (attainment, burn rates) and
`collect --budgets` (the live SLI counters on `/metrics`) both take it from, as SQL over `requests` rows.

A tier's budgeted figures are `ttft`, `tpot` and `e2e` (request level) and each stage with a stage budget
(`queue`, `prefill`, ...). Against each, a request is

- judged when it failed (an outcome other than ok and cancelled: error, rejected, timeout; a row without an
  outcome counts as failed), or ended ok with the figure known. A request the client cancelled is not judged (it
  left, or a benchmark ended with it in flight: neither a success nor a failure of the server), and neither is
  one that ended ok without the figure: an unknown figure is neither met nor missed;
- within the budget when it ended ok and its figure is at most the budget. A failed request is a miss against
  every budget of its tier.

The figure of a request-level budget is the client's when the request has a client span with it, the server's
otherwise (an OpenTelemetry HTTP client span has no first-token time, derive/requests.py); a stage budget is
compared with the stage's column (the TTFT stages inside the TTFT window). A TPOT that does not exist (NaN: one
output token) is known and within its budget. Attainment (goodput) judges a request against all the request-level
budgets at once (`slo_judgement`).
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
FAILED = f"coalesce(outcome, '') NOT IN ('{OK}', '{CANCELLED}')"
"""SQL: the request failed (an outcome other than ok and cancelled; a row without an outcome too)."""


def budgeted_figures(tb: TierBudget) -> dict[str, float]:
    """Figure → budget (ms) of every budgeted figure of the tier: `ttft`, `tpot`, `e2e`, then its stages in stage
    order."""
    out = {f: tb.metric_budget(m) for f, m in METRIC_FIGURES.items() if tb.metric_budget(m) is not None}
    out.update({s: tb.stages[s] for s in BUDGETABLE_STAGES if s in tb.stages})
    return out


def figure_column(metric: str) -> str:
    """SQL: the figure a request-level SLO on `metric` (`ttft_ms`) judges, the client figure where the request has
    it, the server figure otherwise."""
    return f"coalesce({CLIENT_METRIC[metric]}, {metric})"


def value_sql(figure: str) -> str:
    """SQL: the request's value of `figure` (`ttft`, `queue`, ..., ms) as its budget judges it."""
    return figure_column(METRIC_FIGURES[figure]) if figure in METRIC_FIGURES else STAGE_COLUMNS[figure]


def _within_budget(figure: str, budget_ms: float) -> str:
    v = value_sql(figure)
    return f"(isnan({v}) OR {v} <= {budget_ms})" if figure == "tpot" else f"{v} <= {budget_ms}"


def _over_budget(figure: str, budget_ms: float) -> str:
    v = value_sql(figure)
    return f"(NOT isnan({v}) AND {v} > {budget_ms})" if figure == "tpot" else f"{v} > {budget_ms}"


def judged_sql(tb: TierBudget, figure: str) -> str:
    """SQL: the request is judged against the tier's budget of `figure`: it failed, or ended ok with the figure
    known."""
    return f"({FAILED} OR (outcome = '{OK}' AND {value_sql(figure)} IS NOT NULL))"


def within_sql(tb: TierBudget, figure: str) -> str:
    """SQL: the request ended ok within the tier's budget of `figure` (so it is judged)."""
    return f"(outcome = '{OK}' AND coalesce({_within_budget(figure, budgeted_figures(tb)[figure])}, false))"


def slo_judgement(tb: TierBudget | None) -> dict[str, str]:
    """SQL conditions over a `requests` row, the one judgement of a request against its tier's request-level SLOs
    (attainment, and anything that counts met and missed requests). Each budgeted figure is judged where it is
    known; an unknown figure is neither met nor missed:

      `met`     ended ok, at least one budgeted figure known, and every known one within its budget (a NaN TPOT,
                one token, is within);
      `missed`  failed, or ended ok with a known figure over its budget;
      `judged`  met or missed. A request that ended ok with every budgeted figure unknown is neither, and so is a
                cancelled one (the client's choice).

    Per budgeted metric `m` (`ttft_ms`), `met:m` / `judged:m` judge that SLO alone: `within_sql` and `judged_sql`.
    With no request-level budget (or `tb` None), met = ended ok."""
    over, known, out = [], [], {}
    figures = budgeted_figures(tb) if tb is not None else {}
    for f, m in METRIC_FIGURES.items():
        if f not in figures:
            continue
        over.append(f"coalesce({_over_budget(f, figures[f])}, false)")
        known.append(f"{value_sql(f)} IS NOT NULL")
        out[f"met:{m}"] = within_sql(tb, f)
        out[f"judged:{m}"] = judged_sql(tb, f)
    if not over:
        return {
            "met": f"(outcome = '{OK}')",
            "missed": f"({FAILED})",
            "judged": f"(coalesce(outcome, '') <> '{CANCELLED}')",
            **out,
        }
    any_over, any_known = " OR ".join(over), " OR ".join(known)
    met = f"(outcome = '{OK}' AND NOT ({any_over}) AND ({any_known}))"
    missed = f"({FAILED} OR (outcome = '{OK}' AND ({any_over})))"
    return {"met": met, "missed": missed, "judged": f"({met} OR {missed})", **out}


__all__ = [
    "CLIENT_METRIC",
    "STAGE_COLUMNS",
    "METRIC_FIGURES",
    "FAILED",
    "budgeted_figures",
    "figure_column",
    "value_sql",
    "judged_sql",
    "within_sql",
    "slo_judgement",
]
