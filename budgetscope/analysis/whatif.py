"""What if the budgets were different: budgets back to TOML, and one tier's budgets edited and validated by the
same rules as a budgets file."""

from __future__ import annotations

import json

from budgetscope.analysis.budgets import METRICS, Budgets, TierBudget, parse_budgets


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)


def to_toml(budgets: Budgets) -> str:
    """The budgets as a budgets file (TOML) that `parse_budgets` reads back to the same tiers."""
    out = []
    for tb in budgets.tiers:
        out.append(f"[tiers.{_key(tb.name)}]")
        if tb.match:
            out.append("match = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in tb.match.items()) + " }")
        out.append(f"percentile = {tb.percentile:g}")
        out += [f"{m} = {getattr(tb, m):g}" for m in METRICS if getattr(tb, m) is not None]
        if tb.max_error_rate is not None:
            out.append(f"max_error_rate = {tb.max_error_rate!r}")
        if tb.stages:
            out.append(f"[tiers.{_key(tb.name)}.stages]")
            out += [f"{s} = {v:g}" for s, v in tb.stages.items()]
        out.append("")
    return "\n".join(out)


def edit_tier(
    budgets: Budgets, name: str, percentile: float, metrics: dict[str, float | None], stages: dict[str, float | None]
) -> Budgets:
    """The budgets with tier `name` given these budgets (None or 0 = no budget; a tier the budgets lack is added),
    validated like a file: raises BudgetError naming the key when they do not hold together (e.g. stages
    overflowing TTFT)."""
    tiers = list(budgets.tiers)
    if name not in {tb.name for tb in tiers}:
        tiers.append(TierBudget(name=name))
    for i, tb in enumerate(tiers):
        if tb.name == name:
            tiers[i] = TierBudget(
                name=tb.name,
                match=tb.match,
                percentile=percentile,
                max_error_rate=tb.max_error_rate,
                stages={s: v for s, v in stages.items() if v},
                **{m: v for m, v in metrics.items() if v},
            )
    # A round trip through the file format applies exactly the file's validation.
    return parse_budgets(to_toml(Budgets(tuple(tiers))), "what-if budgets")
