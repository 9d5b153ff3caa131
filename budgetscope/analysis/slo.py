"""Budgets as SLOs: the error budget of a tier, the burn-rate windows and the multiwindow, multi-burn-rate alerts of
the Google SRE Workbook ("Alerting on SLOs", chapter 5), and the names of the series that carry them.

Every budgeted figure of a tier (judging.py) is one SLO: "`percentile` % of the tier's judged requests are within
the budget". Its error budget is 1 − percentile/100 (p99 → 1 %), its error ratio over a window the share of the
window's judged requests that missed, and its burn rate that ratio over the error budget (1 spends the budget
exactly over the SLO period). `collect --budgets` exports the counters (`budgetscope/collector/sli.py`),
`budgetscope rules` turns them into Prometheus rules, and `report` computes the same ratios from the archive
(burn.py). docs/alerting.md says it in prose.
"""

from __future__ import annotations

from dataclasses import dataclass

from budgetscope.analysis.budgets import TierBudget
from budgetscope.analysis.judging import METRIC_FIGURES

WINDOWS = {"5m": 300, "30m": 1800, "1h": 3600, "2h": 7200, "6h": 21600, "1d": 86400, "3d": 259200}
"""Window name (Prometheus duration) → seconds: every window the alerts below read."""


@dataclass(frozen=True, slots=True)
class BurnCondition:
    """Fires when the error ratio is over `factor` × the error budget over both windows (the long one measures,
    the short one stops the alert soon after the burn stops)."""

    factor: float
    long: str
    short: str

    def detection_s(self, error_ratio: float, error_budget: float) -> float | None:
        """Seconds from the start of a steady burn at `error_ratio` (after a clean long window) until the long
        window's ratio passes the threshold; None when it never does (the threshold is over the ratio)."""
        threshold = self.factor * error_budget
        if error_ratio <= threshold:
            return None
        return threshold / error_ratio * WINDOWS[self.long]


PAGE = (BurnCondition(14.4, "1h", "5m"), BurnCondition(6.0, "6h", "30m"))
"""The Workbook's page: 2 % of a 30-day budget spent in an hour, or 5 % in six hours."""
TICKET = (BurnCondition(3.0, "1d", "2h"), BurnCondition(1.0, "3d", "6h"))
"""The Workbook's ticket: 10 % of a 30-day budget spent in a day, or in three days."""
SEVERITIES = {"page": PAGE, "ticket": TICKET}

PREFIX = "budgetscope_"
JUDGED = PREFIX + "sli_requests_judged_total"
WITHIN = PREFIX + "sli_requests_within_total"
DURATION = PREFIX + "sli_duration_seconds"
OBJECTIVE = PREFIX + "sli_objective_ratio"
ATTRIBUTION_SHARE = PREFIX + "attribution_share"
ATTRIBUTION_INFO = PREFIX + "attribution_info"
ATTRIBUTION_TAIL = PREFIX + "attribution_tail_requests"
ATTRIBUTION_WINDOW = PREFIX + "attribution_window_seconds"
ATTRIBUTION_LAG = PREFIX + "attribution_lag_seconds"
ATTRIBUTION_IN_FLIGHT = PREFIX + "attribution_in_flight_requests"
LATE = PREFIX + "sli_rederived_after_count_total"
PENDING = PREFIX + "sli_requests_settling"
RECORDED_RATIO = "budgetscope:sli_error_ratio:rate{window}"
"""The recording rules' series (one per window), labels `tier` and `figure`."""


def error_budget(tb: TierBudget) -> float:
    """The share of a tier's judged requests that may miss each of its budgets: 1 − percentile/100."""
    return round(1 - tb.percentile / 100, 12)


def attribution_kind(figure: str) -> str:
    """The attribution (`ttft` or `e2e`) that explains a figure's misses: the TTFT and its stages are inside the
    TTFT; TPOT, E2E, decode and postprocess are not."""
    return "ttft" if figure in ("ttft", "network", "frontend", "queue", "prefill") else "e2e"


def figure_label(figure: str) -> str:
    """`ttft` → `TTFT`, `queue` → `queue stage`: the figure in a sentence."""
    return figure.upper() if figure in METRIC_FIGURES else f"{figure} stage"


__all__ = [
    "WINDOWS",
    "BurnCondition",
    "PAGE",
    "TICKET",
    "SEVERITIES",
    "error_budget",
    "attribution_kind",
    "figure_label",
]
