"""Analysis: budgets, tail attribution, contrast and the report.

from budgetscope.analysis import build_report, load_budgets
report = build_report(archive.con, load_budgets("budgets.toml"))
"""

from budgetscope._lazy import lazy_exports

_EXPORTS = {
    "BudgetError": "budgets",
    "Budgets": "budgets",
    "TierBudget": "budgets",
    "load_budgets": "budgets",
    "parse_budgets": "budgets",
    "build_report": "report",
    "tier_report": "report",
}

# Lazy: `ingest` and `collect` import `analysis.coverage` for their warnings, and the report's modules cost ~50 ms
__getattr__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = ["build_report", "tier_report", "load_budgets", "parse_budgets", "Budgets", "TierBudget", "BudgetError"]
