"""Breakdown: the tail against the body, stage by stage, and each stage's quantiles against its stage budget."""

import state
import streamlit as st

from budgetscope.analysis import charts

ov, f, text, bpath = state.start_page("Breakdown")
path = state.archive_path()
rep = state.report(path, text, f, bpath)
if not state.tier_names(rep)[0]:
    st.info("No tier to show: the filters leave out every tier of the budgets file.")
    st.stop()
c1, c2, c3 = st.columns(3)
tier, base = state.pick_tier(c1, rep, path, text, f, "bd_tier")
choices = sorted({50.0, 75.0, 90.0, 95.0, 99.0, 99.9, base["percentile"]})
pct = c2.selectbox(
    "Tail percentile", choices, index=choices.index(base["percentile"]), format_func=lambda p: f"p{p:g}", key="bd_pct"
)
kind = c3.radio("Latency", ["ttft", "e2e"], format_func=str.upper, horizontal=True, key="bd_kind")
e = base if pct == base["percentile"] else state.tier_at(path, text, tier, pct, f)
a = e["attribution"].get(kind)
if a is None:
    st.info(f"Tier {tier} has no ok request in this selection: nothing to break down.")
    st.stop()
st.markdown(
    f"Tail = the **{a['tail_size']:,}** requests with {a['metric']} ≥ {state.ms(a['tail_min_ms'])} "
    f"(p{pct:g} = {state.ms(a['threshold_ms'])}{', widened to the 10 slowest' if a['tail_widened'] else ''}); "
    f"body = the **{a['body_size']:,}** at or below the median {state.ms(a['median_ms'])}."
)
st.plotly_chart(charts.breakdown_figure(a, f"Mean {kind.upper()} per request by stage: tail vs body"), key="bd_bars")
if a["shares"] is None:
    st.info("The tail is no slower than the body: there is nothing to attribute.")
else:
    st.plotly_chart(charts.shares_figure(a, "Share of the tail's excess over the body"), key="bd_shares")
    st.caption(
        f"Verdict: **{a['verdict']}** by {a['dominant']}. Shares add up to 100%; a stage faster in the tail "
        "than in the body has a negative share."
    )
st.subheader("Each stage's own quantiles against its stage budget")
st.caption("Each stage's quantile on its own: NOT an attribution (their sum is not the tail).")
key = f"p{pct:g}"
rows = [
    {
        "stage": s,
        "column": v["column"],
        "p50": state.ms(v.get("p50")),
        key: state.ms(v.get(key)),
        "budget": "—" if v["budget"] is None else state.ms(v["budget"]),
        "kept": "—" if v["budget"] is None or v.get(key) is None else ("yes" if v[key] <= v["budget"] else "NO"),
    }
    for s, v in e["stages"].items()
]
st.table(rows)
