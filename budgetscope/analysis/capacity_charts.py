"""Plotly figures of a capacity result (`capacity.analyze`) for the dashboard's Capacity page: they only draw
what the analysis computed. plotly is imported when a figure is built."""

from __future__ import annotations

import os
import re

from budgetscope.analysis.capacity import RATE_UNIT, level
from budgetscope.analysis.charts import STAGE_COLORS

TTFT_STAGES = ("network", "frontend", "queue", "prefill", "unaccounted")


def capacity_figure(res: dict, tier: str):
    """Against the offered rate, for one tier: attainment with its target, the tail TTFT with its budget, and each
    stage's share of the TTFT tail (stacked); capacity and knee marked."""
    # imported on use: plotly 103 ms to import
    from plotly.subplots import make_subplots

    pts = [(level(p), p["tiers"][tier]) for p in res["points"] if tier in p["tiers"]]
    c = next(t for t in res["tiers"] if t["name"] == tier)
    key = pts[0][1]["ttft_key"] if pts else "p99"
    budget = next(
        (
            s["tiers"][i]["metrics"]["ttft_ms"]["budget"]
            for s in res["steps"]
            for i, t in enumerate(s["tiers"])
            if t["name"] == tier
        ),
        None,
    )
    rows = [
        "attainment (share of requests meeting every SLO)",
        f"{key} TTFT (ms)",
        "share of the TTFT tail's excess over the body, by stage",
    ]
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07, subplot_titles=rows)
    rates = [r for r, _ in pts]
    fig.add_scatter(
        x=rates,
        y=[t["attainment"] for _, t in pts],
        mode="lines+markers",
        name="attainment",
        line={"color": "#2ca02c"},
        error_y=_interval([t["attainment_interval"] for _, t in pts], [t["attainment"] for _, t in pts]),
        row=1,
        col=1,
    )
    if rates:
        fig.add_scatter(
            x=[rates[0], rates[-1]],
            y=[c["target_attainment"]] * 2,
            mode="lines",
            name="attainment target",
            line={"color": "black", "dash": "dash", "width": 1},
            row=1,
            col=1,
        )
    fig.add_scatter(
        x=rates,
        y=[t["ttft"] for _, t in pts],
        mode="lines+markers",
        name=f"{key} TTFT",
        line={"color": "#d62728"},
        row=2,
        col=1,
    )
    if budget is not None and rates:
        fig.add_scatter(
            x=[rates[0], rates[-1]],
            y=[budget] * 2,
            mode="lines",
            name="TTFT budget",
            line={"color": "black", "dash": "dash", "width": 1},
            row=2,
            col=1,
        )
    for stage in TTFT_STAGES:
        ys = [(t["ttft_shares"] or {}).get(stage) for _, t in pts]
        if any(y is not None for y in ys):
            fig.add_bar(x=rates, y=ys, name=stage, marker={"color": STAGE_COLORS[stage]}, row=3, col=1)
    fig.update_layout(
        barmode="relative", height=820, margin={"t": 40, "b": 40}, legend={"orientation": "h", "y": -0.08}
    )
    fig.update_yaxes(tickformat=".0%", row=1, col=1)
    fig.update_yaxes(tickformat=".0%", row=3, col=1)
    is_rate = res.get("unit", RATE_UNIT) == RATE_UNIT
    fig.update_xaxes(
        title_text="offered rate (requests/s)" if is_rate else "concurrency (requests in flight)", row=3, col=1
    )
    for x, label, color in ((c["capacity"], "capacity", "#2ca02c"), (c["knee"], "knee", "#9467bd")):
        if x is not None:
            fig.add_vline(
                x=x,
                line={"color": color, "dash": "dot"},
                annotation_text=f"{label} {x:g}{'/s' if is_rate else ' in flight'}",
                annotation_position="top left",
            )
    return fig


def write_html(res: dict, folder: str) -> list[str]:
    """One self-contained HTML file (plotly.js inlined: opens offline) per tier with requests, named
    `capacity-<tier>.html` in `folder` (created); returns the paths written."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for c in res["tiers"]:
        if not any(c["name"] in p["tiers"] for p in res["points"]):
            continue
        path = os.path.join(folder, f"capacity-{re.sub(r'[^A-Za-z0-9_.-]', '_', c['name'])}.html")
        fig = capacity_figure(res, c["name"])
        fig.update_layout(title=f"{res.get('target') or 'sweep'}: tier {c['name']}")
        fig.write_html(path, include_plotlyjs=True, full_html=True)
        paths.append(path)
    return paths


def _interval(intervals: list, values: list) -> dict:
    """Asymmetric error bars from (lo, hi) intervals around values."""
    up = [None if iv is None or v is None else iv[1] - v for iv, v in zip(intervals, values)]
    down = [None if iv is None or v is None else v - iv[0] for iv, v in zip(intervals, values)]
    return {"type": "data", "symmetric": False, "array": up, "arrayminus": down, "thickness": 1}
