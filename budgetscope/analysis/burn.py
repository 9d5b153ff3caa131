"""The burn rate of each budget over the SLO windows, from the archive: what Prometheus computes from
`collect --budgets`'s counters (slo.py, docs/alerting.md), for `report` and the dashboard, without Prometheus.

Over a window of length w ending at `end`, the requests of a tier that arrived in [end − w, end) are judged against
each budgeted figure (judging.py, the same function as the counters'); the error ratio is (judged − within) /
judged, the burn rate that ratio over the tier's error budget (1 − percentile/100). `end` is the report's `--until`,
or else just after the newest request it reads. Over the report's whole range the same ratio gives the error budget
left: 1 − error ratio / error budget (negative once it is overspent). A window without a judged request has no
ratio (None), never 0.

All tiers, figures and windows come from one scan of the report's rows.
"""

from __future__ import annotations

import budgetscope.analysis.judging as judging
from budgetscope.analysis.budgets import TierBudget
from budgetscope.analysis.scans import Tiers
from budgetscope.analysis.slo import WINDOWS, error_budget

PERIOD = "period"
"""The key of the figures over the report's whole range."""


def _figures(judged: int, within: int, budget: float) -> dict:
    ratio = (judged - within) / judged if judged else None
    return {
        "judged": judged,
        "within": within,
        "error_ratio": ratio,
        "burn_rate": None if ratio is None else ratio / budget if budget else None,
    }


def burn_rates(con, scope: Tiers, tiers: list[TierBudget | None], until_ns: int | None) -> list[dict | None]:
    """For each tier of `scope` (None, or a tier without a budgeted figure: None), its burn rates:
    `{"error_budget", "end_ns", "windows": {name: seconds}, "figures": {figure: {"budget_ms", "period": {..,
    "budget_left"}, "windows": {name: {"judged", "within", "error_ratio", "burn_rate"}}}}}`."""
    exprs: list[str] = []
    params: list = []
    at: dict[tuple[int, str], int] = {}

    def agg(j: int, cond: str) -> int:
        if (j, cond) not in at:
            member, member_params = scope.member[j]
            at[(j, cond)] = len(exprs)
            exprs.append(f"count_if({member} AND ({cond}))")
            params.extend(member_params)
        return at[(j, cond)]

    plan: dict[int, dict[str, dict[str, tuple[int, int]]]] = {}
    for j, tb in enumerate(tiers):
        figures = judging.budgeted_figures(tb) if tb is not None else {}
        if not figures:
            continue
        plan[j] = {}
        for f in figures:
            judged, within = judging.judged_sql(tb, f), judging.within_sql(tb, f)
            spans = {PERIOD: "true", **{w: f"arrival_ns >= e.end_ns - {s * 1_000_000_000}" for w, s in WINDOWS.items()}}
            plan[j][f] = {w: (agg(j, f"{judged} AND {c}"), agg(j, f"{within} AND {c}")) for w, c in spans.items()}
    if not plan:
        return [None] * len(tiers)
    where = scope.common.where()
    (row,) = con.execute(
        f"""SELECT max(e.end_ns), {", ".join(exprs)} FROM requests,
            (SELECT coalesce(?, max(arrival_ns) + 1) AS end_ns FROM requests {where}) e {where}""",
        [*params, until_ns, *scope.common.params, *scope.common.params],
    ).fetchall()
    end_ns, counts = row[0], row[1:]
    out: list[dict | None] = []
    for j, tb in enumerate(tiers):
        if j not in plan:
            out.append(None)
            continue
        budget = error_budget(tb)
        figures = {}
        for f, positions in plan[j].items():
            got = {w: _figures(counts[a] or 0, counts[b] or 0, budget) for w, (a, b) in positions.items()}
            period = got.pop(PERIOD)
            period["budget_left"] = None if period["burn_rate"] is None else 1 - period["burn_rate"]
            figures[f] = {"budget_ms": judging.budgeted_figures(tb)[f], PERIOD: period, "windows": got}
        out.append(
            {
                "error_budget": budget,
                "end_ns": end_ns if end_ns is None else int(end_ns),
                "windows": dict(WINDOWS),
                "figures": figures,
            }
        )
    return out


__all__ = ["burn_rates", "PERIOD"]
