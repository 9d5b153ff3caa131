"""Analysis: budgets, tail attribution, contrast and the report.

from budgetscope.analysis import build_report, load_budgets
report = build_report(archive.con, load_budgets("budgets.toml"))
"""

from budgetscope.analysis.budgets import BudgetError, Budgets, TierBudget, load_budgets, parse_budgets
from budgetscope.analysis.report import build_report, tier_report

__all__ = ["build_report", "tier_report", "load_budgets", "parse_budgets", "Budgets", "TierBudget", "BudgetError"]
