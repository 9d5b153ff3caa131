"""Plotly figures of the analysis results, shared by the dashboard and the postmortem HTML (so both show the
same timeline). They only draw what `timeline`, `request_view`, `explore` and the report computed; plotly is
imported when a figure is built, never at module import.
"""

from __future__ import annotations

import textwrap
from datetime import datetime, timezone

from budgetscope.analysis.display import utc  # noqa: F401 - re-exported: the dashboard and postmortem use charts.utc

STAGE_COLORS = {
    "network": "#8c564b",
    "frontend": "#9467bd",
    "queue": "#d62728",
    "prefill": "#ff7f0e",
    "decode": "#1f77b4",
    "postprocess": "#2ca02c",
    "unaccounted": "#7f7f7f",
}
BREACH_FILL = "rgba(214, 39, 40, 0.13)"
CATEGORY = "category"
"""The type of every axis of labels (stages, lanes, buckets such as "1", "2-4", "unknown"): set explicitly, since
plotly reads labels that look like numbers as a numeric axis and draws only those."""


def _times(ns: list[int]) -> list[datetime]:
    """ns → naive UTC datetimes (plotly.js reads no zone offset in annotation and shape positions)."""
    return [datetime.fromtimestamp(t / 1e9, tz=timezone.utc).replace(tzinfo=None) for t in ns]


def timeline_figure(tl: dict, height_per_row: int = 170):
    """Rolling pXX TTFT and E2E against budget, arrival rate, queue depth, KV usage and (when sampled) DRAM
    bandwidth and HBM use, on one shared time axis; breach windows shaded; missing series say why."""
    # imported on use: plotly 103 ms to import
    from plotly.subplots import make_subplots

    key = f"p{tl['percentile']:g}"
    rows = [
        f"{key} TTFT (ms)",
        f"{key} E2E (ms)",
        "arrivals / s",
        "queue depth",
        "KV cache used",
        "DRAM bandwidth",
        "HBM used (GB)",
    ]
    fig = make_subplots(rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=0.025, subplot_titles=rows)
    req, eng, gpu = tl["requests"], tl["engine"], tl["gpu"]
    t = _times(req["t_ns"])
    win = tl["window_buckets"] * tl["bucket_ns"] / 1e9
    for row, m, color in ((1, "ttft_ms", "#d62728"), (2, "e2e_ms", "#1f77b4")):
        fig.add_scatter(
            x=t,
            y=req[m],
            name=f"{key} {m[:-3].upper()} (rolling {win:g} s)",
            mode="lines+markers",
            marker={"size": 3},
            line={"color": color},
            connectgaps=False,
            row=row,
            col=1,
        )
        if tl["budgets"][m] is not None:
            fig.add_scatter(
                x=[t[0], t[-1]],
                y=[tl["budgets"][m]] * 2,
                name=f"{m[:-3].upper()} budget",
                mode="lines",
                line={"color": "black", "dash": "dash", "width": 1},
                row=row,
                col=1,
            )
    fig.add_bar(x=t, y=req["arrivals_per_s"], name="arrivals / s", marker={"color": "#7f7f7f"}, row=3, col=1)

    def missing(row: int, why: str) -> None:
        # data coordinates of that row (mid-range time, y = 0.5 on its empty axis): a domain reference here
        # would land on the first row's axes
        text = "<br>".join(textwrap.wrap("missing: " + why, 110))
        # an invisible trace gives the empty row's axes a range to place the note on
        fig.add_scatter(
            x=[t[0], t[-1]],
            y=[0, 1],
            mode="markers",
            marker={"opacity": 0},
            showlegend=False,
            hoverinfo="skip",
            row=row,
            col=1,
        )
        fig.add_annotation(
            text=text, x=t[len(t) // 2], y=0.5, showarrow=False, font={"size": 11, "color": "#555"}, row=row, col=1
        )
        fig.update_yaxes(showticklabels=False, row=row, col=1)

    if eng:
        te = _times(eng["t_ns"])
        fig.add_scatter(x=te, y=eng["queue_depth_mean"], name="queue depth (mean)", mode="lines", row=4, col=1)
        fig.add_scatter(
            x=te, y=eng["queue_depth_max"], name="queue depth (max)", mode="lines", line={"dash": "dot"}, row=4, col=1
        )
        fig.add_scatter(x=te, y=eng["kv_usage_mean"], name="KV used (mean, share)", mode="lines", row=5, col=1)
        fig.update_yaxes(tickformat=".0%", row=5, col=1)
    else:
        for row in (4, 5):
            missing(row, tl["missing"].get("engine", "no engine steps"))
    if gpu and "dram_bandwidth" not in tl["missing"]:
        fig.add_scatter(
            x=_times(gpu["t_ns"]), y=gpu["dram_bandwidth"], name="DRAM bandwidth", mode="lines", row=6, col=1
        )
        fig.update_yaxes(tickformat=".0%", row=6, col=1)
    else:
        missing(6, tl["missing"].get("dram_bandwidth", "no samples"))
    if gpu and "hbm_used_bytes" not in tl["missing"]:
        tg = _times(gpu["t_ns"])
        fig.add_scatter(
            x=tg,
            y=[None if v is None else v / 1e9 for v in gpu["hbm_used_bytes"]],
            name="HBM used",
            mode="lines",
            row=7,
            col=1,
        )
        if any(v is not None for v in gpu["hbm_limit_bytes"]):
            fig.add_scatter(
                x=tg,
                y=[None if v is None else v / 1e9 for v in gpu["hbm_limit_bytes"]],
                name="HBM limit",
                mode="lines",
                line={"dash": "dash", "color": "black"},
                row=7,
                col=1,
            )
    else:
        missing(7, tl["missing"].get("hbm_used_bytes", "no samples"))
    for w in tl["breach_windows"]:
        fig.add_vrect(
            x0=_times([w["start_ns"]])[0],
            x1=_times([w["end_ns"]])[0],
            fillcolor=BREACH_FILL,
            line_width=0,
            layer="below",
            row="all",
            col=1,
        )
    fig.update_layout(
        height=height_per_row * len(rows),
        margin={"l": 50, "r": 20, "t": 40, "b": 30},
        legend={"orientation": "h", "y": -0.03},
        hovermode="x unified",
        bargap=0,
    )
    fig.update_annotations(font_size=12)
    return fig


def breakdown_figure(a: dict, title: str):
    """The tail against the body, stage by stage: mean ms of each stage stacked, tail beside body."""
    # imported on use: plotly 103 ms to import
    import plotly.graph_objects as go

    fig = go.Figure()
    for stage, tail in a["tail_mean_ms"].items():
        if tail is None:  # no request knows it: no bar, rather than a bar of 0
            continue
        share = a["shares"][stage] if a["shares"] else None
        label = f"{stage} ({100 * share:.0f}% of the excess)" if share is not None else stage
        fig.add_bar(
            x=[tail, a["body_mean_ms"][stage]],
            y=[f"tail ({a['tail_size']})", f"body ({a['body_size']})"],
            orientation="h",
            name=label,
            marker={"color": STAGE_COLORS.get(stage)},
        )
    fig.update_layout(
        barmode="relative",
        title=title,
        xaxis_title="mean ms per request",
        height=260,
        margin={"l": 20, "r": 20, "t": 40, "b": 30},
        legend={"orientation": "h", "y": -0.35},
        yaxis={"type": CATEGORY},
    )
    return fig


def shares_figure(a: dict, title: str):
    """Each known stage's share of the tail's excess over the body (they add up to 100%, less what is unknown)."""
    # imported on use: plotly 103 ms to import
    import plotly.graph_objects as go

    stages = [s for s, v in a["shares"].items() if v is not None]  # an unknown stage has no bar (it is not 0)
    fig = go.Figure(
        go.Bar(
            x=[a["shares"][s] for s in stages],
            y=stages,
            orientation="h",
            marker={"color": [STAGE_COLORS.get(s) for s in stages]},
            text=[f"{100 * a['shares'][s]:.0f}%" for s in stages],
            textposition="auto",
        )
    )
    fig.update_layout(
        title=title,
        xaxis_tickformat=".0%",
        height=60 + 32 * len(stages),
        margin={"l": 20, "r": 20, "t": 40, "b": 30},
        yaxis={"autorange": "reversed", "type": CATEGORY},
    )
    return fig


def distribution_figure(d: dict):
    """One dimension's mix in the tail beside the body's."""
    # imported on use: plotly 103 ms to import
    import plotly.graph_objects as go

    vals = [v["value"] for v in d["values"]]
    fig = go.Figure()
    fig.add_bar(x=vals, y=[v["tail_share"] for v in d["values"]], name="tail", marker={"color": "#d62728"})
    fig.add_bar(x=vals, y=[v["body_share"] for v in d["values"]], name="body", marker={"color": "#1f77b4"})
    dist = "n/a" if d["distance"] is None else f"{d['distance']:.2f}"
    fig.update_layout(
        barmode="group",
        title=f"{d['dimension']} (distance {dist})",
        yaxis_tickformat=".0%",
        xaxis={"type": CATEGORY},
        height=260,
        margin={"l": 20, "r": 10, "t": 40, "b": 30},
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def gantt_figure(view: dict):
    """One request: its spans as bars (ms since its first span), its tokens as ticks on their own lanes."""
    # imported on use: plotly 103 ms to import
    import plotly.graph_objects as go

    fig = go.Figure()
    for b in view["bars"]:
        stage = b["lane"].removeprefix("stage: ")
        fig.add_bar(
            y=[b["lane"]],
            x=[b["duration_ms"]],
            base=[b["start_ms"]],
            orientation="h",
            name=b["name"],
            showlegend=False,
            marker={"color": STAGE_COLORS.get(stage, "#bbbbbb")},
            hovertemplate=f"{b['name']}<br>{b['start_ms']:.2f} → {b['end_ms']:.2f} ms "
            f"({b['duration_ms']:.2f} ms)<extra></extra>",
        )
    for side in ("server", "client"):
        toks = [t for t in view["tokens"] if t["side"] == side]
        if toks:
            fig.add_scatter(
                y=[f"{side} tokens"] * len(toks),
                x=[t["t_ms"] for t in toks],
                mode="markers",
                marker={"symbol": "line-ns-open", "size": 14},
                name=f"{side} tokens",
                showlegend=False,
                customdata=[[t["index"], t["gap_ms"] or 0] for t in toks],
                hovertemplate="token %{customdata[0]} at %{x:.2f} ms, gap %{customdata[1]:.2f} ms<extra></extra>",
            )
    lanes = list(dict.fromkeys([b["lane"] for b in view["bars"]] + [f"{t['side']} tokens" for t in view["tokens"]]))
    fig.update_layout(
        barmode="overlay",
        xaxis_title="ms since the request's first span",
        height=90 + 34 * len(lanes),
        margin={"l": 20, "r": 20, "t": 20, "b": 40},
        yaxis={"type": CATEGORY, "categoryorder": "array", "categoryarray": lanes[::-1]},
    )
    return fig


def token_gaps_figure(view: dict):
    """Inter-token gaps (ms) by token index, server and client."""
    # imported on use: plotly 103 ms to import
    import plotly.graph_objects as go

    fig = go.Figure()
    for side in ("server", "client"):
        toks = [t for t in view["tokens"] if t["side"] == side and t["gap_ms"] is not None]
        if toks:
            fig.add_scatter(
                x=[t["index"] for t in toks], y=[t["gap_ms"] for t in toks], mode="lines+markers", name=f"{side} gap"
            )
    fig.update_layout(
        xaxis_title="token", yaxis_title="gap (ms)", height=260, margin={"l": 20, "r": 20, "t": 20, "b": 40}
    )
    return fig
