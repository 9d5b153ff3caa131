"""Prometheus recording and alerting rules over the live SLIs of `collect --budgets` (`budgetscope rules`).

Per tier, one rule group (recording rules first, so that the alerts of the same evaluation read them):

    budgetscope:sli_error_ratio:rate<window>{tier, figure}   for every window of slo.WINDOWS
        = (judged − within) / judged over the window, summed over every collector that exports the tier
    BudgetscopeBudgetBurnPage{tier, figure, severity="page"}      the SRE Workbook's two page conditions
    BudgetscopeBudgetBurnTicket{tier, figure, severity="ticket"}  ... and its two ticket conditions

one alert of each severity for every budgeted figure of the tier. The alert's value is the long window's burn
rate; its annotations read the attribution gauges when it fires (Prometheus query templates): the dominant stage of
the figure's tail with its share, the contrast's first dimension and value, and the `budgetscope report` command
for the window that burned. `scale` shrinks every window (0.01: 1 h becomes 36 s) so that demos and tests run the
same rules in seconds; the series keep their names.
"""

from __future__ import annotations

import json

from budgetscope.analysis import slo
from budgetscope.analysis.budgets import Budgets, TierBudget
from budgetscope.analysis.judging import budgeted_figures

ALERTS = {"page": "BudgetscopeBudgetBurnPage", "ticket": "BudgetscopeBudgetBurnTicket"}
TIME_FORMAT = '"2006-01-02T15:04:05Z07:00"'
"""Go's reference layout of RFC 3339, which `budgetscope report --since/--until` reads."""


class RulesError(ValueError):
    """Budgets that cannot become rules (one line)."""


def duration(seconds: float) -> str:
    """A Prometheus duration: 300 → `5m`, 259200 → `3d`, 2.592 → `2592ms` (whole milliseconds, at least 1)."""
    ms = max(1, round(seconds * 1000))
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    raise AssertionError("unreachable: every whole ms is a multiple of 1 ms")


def _quote(value: str) -> str:
    """A PromQL string literal."""
    return json.dumps(value)


class TierRules:
    """The rules of one tier, windows scaled by `scale`."""

    def __init__(self, tb: TierBudget, scale: float, archive: str, budgets_path: str):
        if "`" in tb.name:
            raise RulesError(f"tier {tb.name!r}: a backquote cannot go into an alert template; rename the tier")
        self.tb, self.scale, self.archive, self.budgets_path = tb, scale, archive, budgets_path
        self.budget = slo.error_budget(tb)
        self.figures = budgeted_figures(tb)

    def window(self, name: str) -> str:
        """The window `name` (`1h`) as this rule set's duration (scaled)."""
        return duration(slo.WINDOWS[name] * self.scale)

    def recorded(self, window: str, figure: str) -> str:
        return f"{slo.RECORDED_RATIO.format(window=window)}{{tier={_quote(self.tb.name)},figure={_quote(figure)}}}"

    def ratio_rule(self, window: str) -> dict:
        sel = f"{{tier={_quote(self.tb.name)}}}"
        rng = f"[{self.window(window)}]"
        judged = f"sum by (tier, figure) (rate({slo.JUDGED}{sel}{rng}))"
        within = f"sum by (tier, figure) (rate({slo.WITHIN}{sel}{rng}))"
        return {
            "record": slo.RECORDED_RATIO.format(window=window),
            "expr": f"({judged} - {within}) / {judged}",
            "labels": {"tier": self.tb.name},  # the series have it: one rule a tier, not the same rule twice
        }

    def condition(self, c: slo.BurnCondition, figure: str) -> str:
        """PromQL: both windows of `c` burn over its factor (the value: the long window's burn rate)."""
        b = repr(self.budget)
        return (
            f"{self.recorded(c.long, figure)} / {b} > {c.factor:g} and "
            f"{self.recorded(c.short, figure)} / {b} > {c.factor:g}"
        )

    def alert(self, severity: str, figure: str) -> dict:
        conds = slo.SEVERITIES[severity]
        expr = " or ".join(f"({self.condition(c, figure)})" for c in conds)
        kind = slo.attribution_kind(figure)
        label = slo.figure_label(figure)
        which = self._which(conds, figure)  # the long window of the first condition that holds
        gauge = f"{{tier={_quote(self.tb.name)},figure={_quote(kind)}}}"
        dominant = (
            f"{{{{ with query `topk(1, {slo.ATTRIBUTION_SHARE}{gauge})` }}}}{{{{ with first . }}}}"
            "{{ .Labels.stage }}{{ end }}{{ else }}unknown{{ end }}"
        )
        share = (
            f"{{{{ with query `topk(1, {slo.ATTRIBUTION_SHARE}{gauge})` }}}}{{{{ with first . }}}}"
            "{{ .Value | humanizePercentage }}{{ end }}{{ else }}unknown{{ end }}"
        )
        contrast = (
            f"{{{{ with query `{slo.ATTRIBUTION_INFO}{gauge}` }}}}{{{{ with first . }}}}{{{{ if .Labels.contrast_dimension }}}}"
            "{{ .Labels.contrast_dimension }}={{ .Labels.contrast_value }}{{ else }}none{{ end }}{{ end }}"
            "{{ else }}unknown{{ end }}"
        )
        return {
            "alert": ALERTS[severity],
            "expr": expr,
            "labels": {"severity": severity, "tier": self.tb.name, "figure": figure},
            "annotations": self.annotations(
                severity,
                figure,
                burn='{{ printf "%.1f" $value }}',
                window=which(self.window),
                stage=dominant,
                share=share,
                contrast=contrast,
                since=which(lambda w: _time(f"time() - {slo.WINDOWS[w] * self.scale!r}")),
                until=_time("time()"),
                attribution_window=_window_gauge(),
            ),
        }

    def annotations(self, severity: str, figure: str, **parts: str) -> dict:
        """The annotations of an alert, `parts` filled in: `burn` (the long window's burn rate), `window` (that
        window), `stage`, `share` (the dominant stage and its share of the tail), `contrast`, `since`, `until`
        (the window's bounds) and `attribution_window`: template snippets in the rules, their expansions in the
        unit tests."""
        label, kind = slo.figure_label(figure), slo.attribution_kind(figure)
        p = parts
        windows = " or ".join(
            f"{c.factor:g}× over {self.window(c.long)} and {self.window(c.short)}" for c in slo.SEVERITIES[severity]
        )
        return {
            "summary": (
                f"{label} budget of tier {self.tb.name} burning at {p['burn']}× over {p['window']}: {p['stage']} "
                f"{p['share']} of the {kind.upper()} tail (contrast: {p['contrast']})"
            ),
            "description": (
                f"SLO: {self.tb.percentile:g} % of judged requests with {label} ≤ {self.figures[figure]:g} ms (the "
                f"tier's p{self.tb.percentile:g} budget); error budget {100 * self.budget:g} %. The Workbook's "
                f"{severity} fires at {windows}. The attribution is over the last {p['attribution_window']} of "
                "arrivals."
            ),
            "dominant_stage": p["stage"],
            "dominant_share": p["share"],
            "contrast": p["contrast"],
            "report": (
                f"budgetscope report --archive {self.archive} --budgets {self.budgets_path} --since {p['since']} "
                f"--until {p['until']}"
            ),
        }

    def _which(self, conds, figure: str):
        """f(window name → text) → a template giving f(long window of the first condition that holds)."""

        def pick(f) -> str:
            out = f(conds[-1].long)
            for c in reversed(conds[:-1]):
                out = f"{{{{ if query `{self.condition(c, figure)}` }}}}{f(c.long)}{{{{ else }}}}{out}{{{{ end }}}}"
            return out

        return pick

    def group(self) -> dict:
        rules = [self.ratio_rule(w) for w in slo.WINDOWS]
        rules += [self.alert(s, f) for s in slo.SEVERITIES for f in self.figures]
        return {"name": f"budgetscope-slo-{self.tb.name}", "rules": rules}

    def unreachable(self) -> list[str]:
        """One line for each burn condition that cannot fire: its threshold is an error ratio over 100 %."""
        out = []
        for severity, conds in slo.SEVERITIES.items():
            for c in conds:
                if c.factor * self.budget >= 1:
                    out.append(
                        f"tier {self.tb.name} (p{self.tb.percentile:g}, error budget {100 * self.budget:g} %): the "
                        f"{severity} condition {c.factor:g}× over {c.long} needs an error ratio over "
                        f"{100 * c.factor * self.budget:g} %: it never fires"
                    )
        return out


def _time(promql: str) -> str:
    """A template printing the PromQL scalar `promql` (seconds since the epoch) as RFC 3339."""
    return f"{{{{ with query `{promql}` }}}}{{{{ (. | first | value | toTime).Format {TIME_FORMAT} }}}}{{{{ end }}}}"


def _window_gauge() -> str:
    return (
        f"{{{{ with query `max({slo.ATTRIBUTION_WINDOW})` }}}}{{{{ . | first | value | humanizeDuration }}}}"
        "{{ else }}(unknown: no attribution gauge){{ end }}"
    )


def tier_rules(budgets: Budgets, scale: float = 1.0, archive: str = "ARCHIVE", budgets_path: str | None = None):
    """The TierRules of every tier with a budgeted figure (a tier without one has no SLO)."""
    if not scale > 0:
        raise RulesError(f"the window scale must be > 0, got {scale!r}")
    path = budgets_path or budgets.path or "budgets.toml"
    return [TierRules(tb, scale, archive, path) for tb in budgets.tiers if budgeted_figures(tb)]


def rule_file(budgets: Budgets, scale: float = 1.0, archive: str = "ARCHIVE", budgets_path: str | None = None) -> dict:
    """The rule file (`{"groups": [...]}`) of `budgets`."""
    return {"groups": [t.group() for t in tier_rules(budgets, scale, archive, budgets_path)]}


__all__ = ["rule_file", "tier_rules", "TierRules", "RulesError", "duration", "ALERTS"]
