"""Budgets: per tier, the one-sentence verdict, attainment and p50/p95/p99 of TTFT, TPOT and E2E against budget, and
the error budget left and the burn rates of each budgeted figure."""

import state
import streamlit as st

from budgetscope.analysis.render import burn_table, report_lines
from budgetscope.analysis.slo import figure_label
from budgetscope.analysis.verdict import LABEL, outcomes_words

ov, f, text, bpath = state.start_page("Budgets")
rep = state.report(state.archive_path(), text, f, bpath)
# what the report could not read, of the selection (the head's notes hold the archive's coverage and misreads: the
# same when nothing is narrowed)
for line in report_lines(rep, coverage=f.narrowed, misread=f.narrowed):
    st.caption("ℹ️ " + line)
if not rep["tiers"]:
    st.info("No tier to show: the filters leave out every tier of the budgets file.")
# tiers with requests first: a budgeted tier that matched none is one line at the end, not the page's opening
shown = [e for e in rep["tiers"] if e["requests"]]
empty = [e["name"] for e in rep["tiers"] if not e["requests"]]
if empty and not shown and rep["unbudgeted_tiers"]:
    st.warning(
        "No budgeted tier has requests here; the requests are in tiers with no budget: "
        + ", ".join(f"{t} ({n:,} requests)" for t, n in rep["unbudgeted_tiers"].items())
        + ". Check the tiers' `match` in the budgets file, or open these tiers on the Breakdown page (at p99)."
    )
for e in shown:
    st.header(f"Tier {e['name']}")
    state.verdict_box(e)
    key = f"p{e['percentile']:g}"
    c1, c2, c3, c4 = st.columns(4)
    c1.metric(
        "Attainment (goodput)",
        "n/a" if e["attainment"] is None else f"{100 * e['attainment']:.1f}%",
        help=f"over the {e.get('attainment_over', e['judged_requests']):,} requests judged on a known figure; "
        + "; ".join(
            f"{LABEL[m]}: "
            + ("unknown (no request has it)" if not v["judged"] else f"{v['met']:,} of {v['judged']:,} met")
            for m, v in (e.get("attainment_by_figure") or {}).items()
        ),
    )
    rate = "n/a" if e["error_rate"] is None else f"{100 * e['error_rate']:.1f}%"
    c2.metric(
        "Requests",
        f"{e['requests']:,}",
        help=f"{e['ok_requests']:,} ended ok: {outcomes_words(e['outcomes'])}; "
        f"error rate {rate} (max {100 * e['max_error_rate']:g}%). Percentiles are over the ok requests.",
    )
    c3.metric(
        f"{key} TTFT",
        state.ms(e["metrics"]["ttft_ms"][key]),
        help=f"budget {state.ms(e['metrics']['ttft_ms']['budget'])}",
    )
    c4.metric(
        f"{key} E2E", state.ms(e["metrics"]["e2e_ms"][key]), help=f"budget {state.ms(e['metrics']['e2e_ms']['budget'])}"
    )
    cols = ["p50", "p95", "p99"] + ([key] if key not in ("p50", "p95", "p99") else [])
    rows = [
        {
            "metric": LABEL[m],
            "column": v["column"],
            **{c: state.ms(v.get(c)) for c in cols},
            "budget": "—" if v["budget"] is None else state.ms(v["budget"]),
            "kept": "—" if v["budget"] is None or v[key] is None else ("yes" if v[key] <= v["budget"] else "NO"),
        }
        for m, v in e["metrics"].items()
    ]
    st.table(rows)
    if burn := burn_table(e.get("burn_rates")):
        title, headers, burn_rows = burn
        left = {f: v["period"]["budget_left"] for f, v in e["burn_rates"]["figures"].items()}
        known = {f: x for f, x in left.items() if x is not None}
        worst = min(known, key=known.get) if known else None
        st.metric(
            "Error budget left (worst figure, over the selected range)",
            "n/a" if worst is None else f"{100 * known[worst]:.0f}% ({figure_label(worst)})",
            help=f"1 − the share of judged requests that missed the budget / the error budget "
            f"({100 * e['burn_rates']['error_budget']:g}% = 1 − p{e['percentile']:g}); below 0 it is spent. "
            "A burn rate is the same ratio over a window ending at the newest request: 1 spends the budget exactly "
            "over the SLO period, 14.4 over 1h and 5m pages (docs/alerting.md). The same figures Prometheus "
            "computes from `collect --budgets`.",
        )
        st.caption(title[0].upper() + title[1:])
        st.table([dict(zip(headers, r)) for r in burn_rows])
    st.markdown(e["verdict"])
    if e["figures"] == "server" and e["requests_without_client_span"]:
        st.caption(
            f"{e['requests_without_client_span']:,} requests have no client span: server-side figures, "
            "no network stage."
        )
if empty:
    st.caption("Budgeted tiers with no request in the selection (UNKNOWN: nothing to judge): " + ", ".join(empty) + ".")
if rep["unbudgeted_tiers"]:
    st.caption(
        "Tiers with no budget in the file: "
        + ", ".join(f"{t} ({n:,} requests)" for t, n in rep["unbudgeted_tiers"].items())
    )
if not bpath:
    st.caption("Opened without a budgets file: every tier at p99, no budget (use `--budgets`).")
