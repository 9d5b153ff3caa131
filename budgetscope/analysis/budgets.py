"""The budgets file (TOML): latency budgets per tier, validated with errors that name the file and the key.

```toml
[tiers.interactive]               # requests whose budgetscope.tier is "interactive"
match = { model = "llama-3-8b" }  # optional extra filters on tier, model, tenant, service_name, source
percentile = 99
ttft_ms = 800
tpot_ms = 50
e2e_ms = 12000
max_error_rate = 0.01             # optional: the share of requests that may fail (default 1 - percentile/100)

[tiers.interactive.stages]        # the TTFT budget split into stage budgets (ms)
network = 50
queue = 250
```
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 has no tomllib; tomli is the same parser (a dependency on 3.10 only)
    import tomli as tomllib

METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")
BUDGETABLE_STAGES = ("network", "frontend", "queue", "prefill", "decode", "postprocess")
TTFT_STAGES = ("network", "frontend", "queue", "prefill")
MATCH_KEYS = ("tier", "model", "tenant", "service_name", "source")
TIER_KEYS = ("match", "percentile", *METRICS, "max_error_rate", "stages")
MAX_TIERS = 256
"""Tiers one budgets file may declare (docs/budgets.md): a tier is an SLO class, and a report's time grows with
its tiers (docs/benchmarks.md, "Tiers at the bound")."""
BOM = "\ufeff"


class BudgetError(ValueError):
    """A budgets file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True, slots=True)
class TierBudget:
    """The budgets of one tier. Budgets are in ms; None means no budget."""

    name: str
    match: dict[str, str] = field(default_factory=dict)
    percentile: float = 99.0
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    stages: dict[str, float] = field(default_factory=dict)
    max_error_rate: float | None = None  # a fraction of the requests; None: the default of `error_budget`

    @property
    def filters(self) -> dict[str, str]:
        """Column → value that a request must have to belong to this tier."""
        return {"tier": self.name, **self.match}

    def metric_budget(self, metric: str) -> float | None:
        return getattr(self, metric)

    def error_budget(self) -> float:
        """The share of the tier's requests (cancelled ones aside) that may fail: `max_error_rate` when declared,
        else 1 - percentile/100 (at p99, 1 %): more failures than that and the percentile's promise cannot hold
        whatever the latency of the rest."""
        return self.max_error_rate if self.max_error_rate is not None else round(1 - self.percentile / 100, 12)


@dataclass(frozen=True, slots=True)
class Budgets:
    tiers: tuple[TierBudget, ...]
    path: str | None = None


def _number(where: str, key: str, v, *, positive: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0):
        raise BudgetError(f"{where}.{key}: must be a positive number of ms, got {v!r}")
    return float(v)


def _fraction(where: str, key: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
        raise BudgetError(f"{where}.{key}: must be a fraction from 0 to 1 (0.01 = 1 % of requests), got {v!r}")
    return float(v)


def _tier(src: str, name: str, t) -> TierBudget:
    where = f"{src}: tiers.{name}"
    if not isinstance(t, dict):
        raise BudgetError(f"{where}: must be a table, got {t!r}")
    for k in t:
        if k not in TIER_KEYS:
            raise BudgetError(f"{where}.{k}: unknown key (expected one of: {', '.join(TIER_KEYS)})")
    match = t.get("match", {})
    if not isinstance(match, dict):
        raise BudgetError(f'{where}.match: must be a table such as {{ model = "llama-3-8b" }}')
    for k, v in match.items():
        if k not in MATCH_KEYS:
            raise BudgetError(f"{where}.match.{k}: unknown filter (expected one of: {', '.join(MATCH_KEYS)})")
        if not isinstance(v, str):
            raise BudgetError(f"{where}.match.{k}: must be a string, got {v!r}")
    pct = t.get("percentile", 99)
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 < pct < 100:
        raise BudgetError(f"{where}.percentile: must be a number between 0 and 100 (exclusive), got {pct!r}")
    metrics = {m: _number(where, m, t[m]) for m in METRICS if m in t}
    error_rate = _fraction(where, "max_error_rate", t["max_error_rate"]) if "max_error_rate" in t else None
    stages_raw = t.get("stages", {})
    if not isinstance(stages_raw, dict):
        raise BudgetError(f"{where}.stages: must be a table of stage = ms")
    stages = {}
    for s, v in stages_raw.items():
        if s not in BUDGETABLE_STAGES:
            hint = " (unaccounted time has no budget: it is what no stage explains)" if s == "unaccounted" else ""
            raise BudgetError(
                f"{where}.stages.{s}: unknown stage (expected one of: {', '.join(BUDGETABLE_STAGES)}){hint}"
            )
        stages[s] = _number(f"{where}.stages", s, v)
    ttft_part = sum(v for s, v in stages.items() if s in TTFT_STAGES)
    if "ttft_ms" in metrics and ttft_part > metrics["ttft_ms"]:
        raise BudgetError(
            f"{where}.stages: network + frontend + queue + prefill = {ttft_part:g} ms "
            f"overflows ttft_ms = {metrics['ttft_ms']:g}"
        )
    if "e2e_ms" in metrics and sum(stages.values()) > metrics["e2e_ms"]:
        raise BudgetError(
            f"{where}.stages: the stage budgets add up to {sum(stages.values()):g} ms, "
            f"overflowing e2e_ms = {metrics['e2e_ms']:g}"
        )
    return TierBudget(
        name=name, match=dict(match), percentile=float(pct), stages=stages, max_error_rate=error_rate, **metrics
    )


def parse_budgets(text: str, source: str = "<budgets>") -> Budgets:
    """Parse and validate budgets TOML text; `source` names it in errors. A UTF-8 byte order mark before it (what
    some Windows editors write) is read as nothing."""
    try:
        doc = tomllib.loads(text.removeprefix(BOM))
    except tomllib.TOMLDecodeError as e:
        raise BudgetError(f"{source}: invalid TOML ({e})") from None
    except RecursionError:  # tomllib reads nested arrays and inline tables recursively
        raise BudgetError(f"{source}: invalid TOML (arrays or tables nested too deep)") from None
    for k in doc:
        if k != "tiers":
            raise BudgetError(f"{source}: {k}: unknown key (a budgets file has one table, [tiers.<name>])")
    tiers = doc.get("tiers")
    if not isinstance(tiers, dict) or not tiers:
        raise BudgetError(f"{source}: no tiers (add a [tiers.<name>] table)")
    if len(tiers) > MAX_TIERS:
        raise BudgetError(
            f"{source}: {len(tiers):,} tiers; a budgets file may declare at most {MAX_TIERS} (docs/budgets.md)"
        )
    return Budgets(tuple(_tier(source, n, t) for n, t in tiers.items()), source)


def load_budgets(path: str | Path) -> Budgets:
    """Read and validate a budgets file."""
    p = Path(path)
    if p.is_dir():
        raise BudgetError(f"{p}: is a directory, not a budgets file")
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BudgetError(f"{p}: no such budgets file") from None
    except UnicodeDecodeError:
        raise BudgetError(f"{p}: not a UTF-8 text file") from None
    return parse_budgets(text, str(p))
