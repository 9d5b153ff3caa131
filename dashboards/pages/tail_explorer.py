"""Tail explorer: what separates the tail from the body, every dimension ranked, the two mixes side by side."""

import state
import streamlit as st

from budgetscope.analysis import charts

ov, f, text, bpath = state.start_page("Tail explorer")
path = state.archive_path()
rep = state.report(path, text, f, bpath)
ALL = "(all tiers)"
c1, c2, c3 = st.columns(3)
tier, entry = state.pick_tier(c1, rep, path, text, f, "te_tier", more=(ALL,))
kind = c2.radio("Latency", ["ttft", "e2e"], format_func=str.upper, horizontal=True, key="te_kind")
default = entry["percentile"] if entry else 99.0
choices = sorted({75.0, 90.0, 95.0, 99.0, 99.9, default})
pct = c3.selectbox(
    "Tail percentile", choices, index=choices.index(default), format_func=lambda p: f"p{p:g}", key="te_pct"
)
if entry is not None and entry["attribution"].get(kind):
    metric = entry["attribution"][kind]["metric"]
else:
    metric = "ttft_ms" if kind == "ttft" else "e2e_ms"
sp, dists = state.tail_mixes(path, text, None if tier == ALL else tier, metric, pct / 100, f)
if sp is None:
    st.info("No ok request in this selection: there is no tail to explore.")
    st.stop()
st.markdown(
    f"**{metric}**: tail = {sp.tail_size:,} requests ≥ {state.ms(sp.tail_min_ms)}"
    f"{' (widened to the 10 slowest)' if sp.widened else ''}; body = {sp.body_size:,} requests ≤ median "
    f"{state.ms(sp.median_ms)}. Distance = total variation distance between the two mixes (0 same, 1 disjoint)."
)
st.table(
    [
        {
            "rank": i + 1,
            "dimension": d["dimension"],
            "distance": None if d["distance"] is None else round(d["distance"], 3),
            "most over-represented in the tail": d["top_value"],
        }
        for i, d in enumerate(dists)
    ]
)
if not ov["engine_steps"]:
    st.caption(
        "Batch size at admission is missing: the archive has no engine.step spans (only the reference "
        "engine emits them)."
    )
cols = st.columns(2)
for i, d in enumerate(dists):
    with cols[i % 2]:
        st.plotly_chart(charts.distribution_figure(d), key=f"te_dist_{d['dimension']}")
