"""The postmortem: the budget verdict and the timeline of every tier over an incident window, as ONE
self-contained HTML file (data, plotly.js and CSS inline; it fetches nothing) to attach to an incident.
"""

from __future__ import annotations

import html

from budgetscope.analysis import charts, display, timeline
from budgetscope.analysis.budgets import Budgets, TierBudget
from budgetscope.analysis.coverage import coverage_line
from budgetscope.analysis.overview import client_note, headline
from budgetscope.analysis.render import report_lines
from budgetscope.analysis.report import build_report
from budgetscope.analysis.verdict import LABEL, ms

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1200px;
       color: #222; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
.meta { color: #666; } .headline { font-size: 1.25rem; font-weight: 600; margin: .6rem 0; }
.broke { color: #b00020; } .kept { color: #1b7f3b; } .unknown { color: #8a6d00; } .note { background: #fff8e1; padding: .5rem .8rem;
border-left: 4px solid #f0b400; margin: .5rem 0; } table { border-collapse: collapse; margin: .6rem 0; }
td, th { border: 1px solid #ddd; padding: .25rem .6rem; text-align: right; } th { background: #f5f5f5; }
td:first-child, th:first-child { text-align: left; }
"""


def build_postmortem(
    con,
    budgets: Budgets | None,
    since_ns: int | None,
    until_ns: int | None,
    filters: dict | None = None,
    last_commit_ns: int | None = None,
    split_traces: int | None = None,
) -> dict:
    """The report and every reported tier's timeline over [since_ns, until_ns); `last_commit_ns`, `split_traces`:
    as `build_report`'s (an archive being written warns of the requests in flight; a sharded root's split traces)."""
    rep = build_report(
        con, budgets, since_ns, until_ns, filters=filters, last_commit_ns=last_commit_ns, split_traces=split_traces
    )
    tiers = {tb.name: tb for tb in budgets.tiers} if budgets else {}
    timelines = [
        timeline.tier_timeline(con, tiers.get(e["name"], TierBudget(name=e["name"])), e, since_ns, until_ns, filters)
        for e in rep["tiers"]
    ]
    return {
        "report": rep,
        "timelines": timelines,
        "since_ns": since_ns,
        "until_ns": until_ns,
    }


def notes(rep: dict) -> list[str]:
    """What the postmortem notes beside its figures, all of its window (the coverage line is in its heading): what
    the client spans leave unknown, the report's warnings (nothing derived, requests in flight) and what it could
    not read or misread (`report_lines`)."""
    cov = rep["coverage"]
    client = client_note(cov["requests"], cov["with_client_spans"])
    return [*([client] if client else []), *rep["warnings"], *report_lines(rep, coverage=False)]


def _metrics_table(e: dict) -> str:
    key = f"p{e['percentile']:g}"
    cols = ["p50", "p95", "p99"] + ([key] if key not in ("p50", "p95", "p99") else [])
    head = "".join(f"<th>{c}</th>" for c in cols)
    rows = "".join(
        f"<tr><td>{LABEL[m]} ({html.escape(v['column'])})</td>"
        + "".join(f"<td>{ms(v.get(c))}</td>" for c in cols)
        + f"<td>{ms(v['budget']) if v['budget'] is not None else '—'}</td></tr>"
        for m, v in e["metrics"].items()
    )
    return f"<table><tr><th>metric</th>{head}<th>budget</th></tr>{rows}</table>"


def _windows_table(tl: dict) -> str:
    if not tl["breach_windows"]:
        return "<p>No window of this range breaks the budget at the tier's percentile.</p>"
    rows = []
    for w in tl["breach_windows"]:
        peaks = "; ".join(f"{LABEL[m]} {ms(v)}" for m, v in w["peaks"].items())
        moved = display.moved(w["moved"])
        rows.append(
            f"<tr><td>{charts.utc(w['start_ns'])}</td><td>{charts.utc(w['end_ns'])}</td>"
            f"<td>{html.escape(peaks)}</td><td>{html.escape(moved)}</td></tr>"
        )
    return (
        "<table><tr><th>from</th><th>to</th><th>peak</th><th>what moved (inside vs outside)</th></tr>"
        + "".join(rows)
        + "</table>"
    )


STATUS_CLASS = {"KEPT": "kept", "BROKEN": "broke", "UNKNOWN": "unknown"}
REPORT_WORDS = {
    "KEPT": "every tier kept its budgets",
    "BROKEN": "a budget broke",
    "UNKNOWN": "a tier could not be judged (its figures are unknown)",
}


def render_html(pm: dict, title: str = "budgetscope postmortem") -> str:
    """The postmortem as one self-contained HTML document."""
    rep = pm["report"]
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p class='meta'>Requests that arrived from {charts.utc(pm['since_ns'])} to {charts.utc(pm['until_ns'])}"
        f"{' · budgets ' + html.escape(rep['budgets_file']) if rep['budgets_file'] else ' · no budgets file'}"
        f" · {REPORT_WORDS[rep['status']]}</p>",
        f"<p class='meta'>{html.escape(coverage_line(rep['coverage']))}</p>",
    ]
    parts += [f"<div class='note'>{html.escape(n)}</div>" for n in notes(rep)]
    if not rep["tiers"]:
        parts.append("<div class='note'>No tier to report: no budgets tier matched and no requests were found.</div>")
    first_plot = True
    for e, tl in zip(rep["tiers"], pm["timelines"]):
        cls = STATUS_CLASS[e["status"]]
        parts.append(f"<h2>tier {html.escape(e['name'])}</h2>")
        parts.append(f"<p class='headline {cls}'>{html.escape(headline(e))}</p>")
        att = "n/a" if e["attainment"] is None else f"{100 * e['attainment']:.1f}%"
        parts.append(
            f"<p>{e['requests']:,} requests ({e['ok_requests']:,} ok) · attainment {att} · {e['figures']} figures</p>"
        )
        parts.append(f"<p>{html.escape(e['verdict'])}</p>")
        parts.append(_metrics_table(e))
        if tl["empty"]:
            parts.append(f"<div class='note'>Timeline: {html.escape(tl['why'])}</div>")
            continue
        for name, why in tl["missing"].items():
            parts.append(f"<div class='note'>{html.escape(name)}: {html.escape(why)}</div>")
        fig = charts.timeline_figure(tl)
        parts.append(fig.to_html(full_html=False, include_plotlyjs=first_plot, config={"displaylogo": False}))
        first_plot = False
        parts.append("<h3>Breach windows</h3>" + _windows_table(tl))
    body = "\n".join(parts)
    return (
        f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{CSS}</style></head><body>\n{body}\n</body></html>\n"
    )
