"""A Grafana dashboard over the live SLIs of `collect --budgets` (`budgetscope example grafana`): per tier, the error
budget left over 30 days and the burn rates of every budgeted figure, the quantiles against the budgets, the stage
shares of the tail with the dominant stage and the contrast, and the collector's own lags. Every expression reads
the series collect exports (not the recording rules: the dashboard works before `budgetscope rules` is loaded).
"""

from __future__ import annotations

from budgetscope.analysis import slo

DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'tier=~"$tier", figure=~"$figure"'


def _ratio(window: str) -> str:
    """PromQL: the error ratio of each selected figure over `window`."""
    judged = f"sum by (figure) (rate({slo.JUDGED}{{{SEL}}}[{window}]))"
    within = f"sum by (figure) (rate({slo.WITHIN}{{{SEL}}}[{window}]))"
    return f"(({judged} - {within}) / {judged})"


BUDGET = f'scalar(1 - max({slo.OBJECTIVE}{{tier=~"$tier"}}))'
"""PromQL: the tier's error budget, 1 − percentile/100."""


def _panel(pid: int, title: str, kind: str, grid: tuple[int, int, int, int], targets: list[tuple[str, str]], **extra):
    x, y, w, h = grid
    return {
        "id": pid,
        "type": kind,
        "title": title,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
        **extra,
    }


def _thresholds(*steps: tuple[str, float | None]) -> dict:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]}


def dashboard() -> dict:
    """The dashboard as Grafana's JSON model (import it, pick the Prometheus data source)."""
    burn = [(f"{_ratio(w)} / {BUDGET}", f"{{{{figure}}}} {w}") for w in ("5m", "1h", "6h")]
    quantile = (
        f'histogram_quantile(0.99, sum by (le, figure) (rate({slo.DURATION}_bucket{{tier=~"$tier"}}[5m])))',
        "p99 {{figure}}",
    )
    panels = [
        _panel(
            1,
            "Error budget left (30 days)",
            "stat",
            (0, 0, 12, 6),
            [(f"1 - {_ratio('30d')} / {BUDGET}", "{{figure}}")],
            fieldConfig={
                "defaults": {
                    "unit": "percentunit",
                    "thresholds": _thresholds(("red", None), ("orange", 0.25), ("green", 0.5)),
                },
                "overrides": [],
            },
            description="1 − the error ratio over 30 days / the error budget (1 − percentile/100): below 0 the "
            "budget is spent.",
        ),
        _panel(
            2,
            "Burn rate (× the error budget): page at 14.4 over 1h and 5m, 6 over 6h and 30m",
            "timeseries",
            (12, 0, 12, 6),
            burn,
            fieldConfig={
                "defaults": {
                    "thresholds": _thresholds(("green", None), ("orange", 6), ("red", 14.4)),
                    "custom": {"thresholdsStyle": {"mode": "line"}},
                },
                "overrides": [],
            },
        ),
        _panel(
            3,
            "p99 against the budgets (s)",
            "timeseries",
            (0, 6, 12, 8),
            [quantile],
            fieldConfig={"defaults": {"unit": "s"}, "overrides": []},
            description="From the histograms, whose bucket bounds include every budget: a quantile at a budget "
            "is exact there.",
        ),
        _panel(
            4,
            "Share of the TTFT tail by stage (sliding window)",
            "timeseries",
            (12, 6, 12, 8),
            [(f'{slo.ATTRIBUTION_SHARE}{{tier=~"$tier", figure="ttft"}}', "{{stage}}")],
            fieldConfig={
                "defaults": {"unit": "percentunit", "custom": {"stacking": {"mode": "none"}}},
                "overrides": [],
            },
        ),
        _panel(
            5,
            "Share of the E2E tail by stage (sliding window)",
            "timeseries",
            (0, 14, 12, 8),
            [(f'{slo.ATTRIBUTION_SHARE}{{tier=~"$tier", figure="e2e"}}', "{{stage}}")],
            fieldConfig={"defaults": {"unit": "percentunit"}, "overrides": []},
        ),
        _panel(
            6,
            "Dominant stage and what separates the tail",
            "table",
            (12, 14, 12, 8),
            [(f'{slo.ATTRIBUTION_INFO}{{tier=~"$tier"}}', "")],
            options={"showHeader": True},
            transformations=[{"id": "labelsToFields", "options": {"mode": "columns"}}],
        ),
        _panel(
            7,
            "Judged requests / s",
            "timeseries",
            (0, 22, 12, 6),
            [(f"sum by (figure) (rate({slo.JUDGED}{{{SEL}}}[5m]))", "{{figure}}")],
            fieldConfig={"defaults": {"unit": "reqps"}, "overrides": []},
        ),
        _panel(
            8,
            "Collector: commit age, attribution lag (s), rows settling, requests in flight",
            "timeseries",
            (12, 22, 12, 6),
            [
                ("max(budgetscope_collector_commit_age_seconds)", "commit age"),
                (f"max({slo.ATTRIBUTION_LAG})", "attribution lag"),
                (f"sum({slo.PENDING})", "rows settling"),
                (f"sum({slo.ATTRIBUTION_IN_FLIGHT})", "in flight (left out of the attribution)"),
                (f"sum(rate({slo.LATE}[5m]))", "re-derived after counting / s"),
            ],
        ),
    ]
    variables = [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
        {
            "name": "tier",
            "type": "query",
            "datasource": DS,
            "query": f"label_values({slo.JUDGED}, tier)",
            "refresh": 2,
        },
        {
            "name": "figure",
            "type": "query",
            "datasource": DS,
            "query": f'label_values({slo.JUDGED}{{tier=~"$tier"}}, figure)',
            "refresh": 2,
            "multi": True,
            "includeAll": True,
            "current": {"text": "All", "value": "$__all"},
        },
    ]
    return {
        "title": "budgetscope: budgets as SLOs",
        "uid": "budgetscope-slo",
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "tags": ["budgetscope", "slo"],
        "templating": {"list": variables},
        "panels": panels,
        "description": "The live SLIs of `budgetscope collect --budgets` (docs/alerting.md).",
    }


__all__ = ["dashboard"]
