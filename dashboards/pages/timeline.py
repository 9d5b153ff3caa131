"""Timeline / postmortem: rolling tail latency against budget, arrival rate, queue depth, KV usage and GPU
samples over time, breach windows shaded; pick a window to list its requests."""

import state
import streamlit as st

from budgetscope.analysis import charts, display
from budgetscope.analysis.verdict import LABEL

ov, f, text, bpath = state.start_page("Timeline / postmortem")
path = state.archive_path()
rep = state.report(path, text, f, bpath)
if not state.tier_names(rep)[0]:
    st.info("No tier to show: the filters leave out every tier of the budgets file.")
    st.stop()
tier, entry = state.pick_tier(st, rep, path, text, f, "tl_tier")
tl = state.tier_timeline(path, text, tier, f, entry)
if tl["empty"]:
    st.info(f"Timeline: {tl['why']}.")
    st.stop()

state.verdict_box(entry)
st.caption(
    f"Buckets of {tl['bucket_ns'] / 1e9:g} s; the p{tl['percentile']:g} at each bucket is over the requests "
    f"that arrived in the {tl['window_buckets']} buckets ending there ({tl['columns']['ttft_ms']}, "
    f"{tl['columns']['e2e_ms']}). Shaded: breach windows."
)
for name, why in tl["missing"].items():
    st.caption(f"ℹ️ {name} missing — {why}")
st.plotly_chart(charts.timeline_figure(tl), key="tl_chart")
st.caption(
    "`budgetscope postmortem --archive A --budgets B --from T --to T --out incident.html` writes this "
    "timeline and the verdict as one self-contained HTML file."
)

st.subheader("Requests of a window")
windows = tl["breach_windows"]
labels = [
    f"{state.utc(w['start_ns'])} → {state.utc(w['end_ns'])}: "
    + ", ".join(f"{LABEL[m]} peak {state.ms(v)}" for m, v in w["peaks"].items())
    for w in windows
]
CUSTOM = "a range of my choice"
pick = st.selectbox(
    "Window", labels + [CUSTOM], key="tl_window", help="Breach windows first; or choose any range of buckets."
)
if pick == CUSTOM:
    times = list(range(len(tl["requests"]["t_ns"]) + 1))
    lo, hi = st.select_slider(
        "Buckets",
        options=times,
        value=(0, len(times) - 1),
        key="tl_range",
        format_func=lambda k: state.utc(tl["start_ns"] + k * tl["bucket_ns"])[11:23],
    )
    start, end = tl["start_ns"] + lo * tl["bucket_ns"], tl["start_ns"] + max(hi, lo + 1) * tl["bucket_ns"]
else:
    w = windows[labels.index(pick)]
    start, end = w["start_ns"], w["end_ns"]
    if moved := display.moved(w["moved"]):
        st.caption("What moved (mean inside the window vs outside): " + moved)
order = st.selectbox(
    "Slowest first by",
    ["e2e_ms", "ttft_ms", "client_ttft_ms", "client_e2e_ms", "queue_ms", "prefill_ms", "decode_ms", "network_ms"],
    key="tl_order",
)
cols, rows, total = state.window_requests(path, text, tier, start, end, f, order)
st.caption(
    f"{total:,} requests arrived in [{state.utc(start)}, {state.utc(end)}); the {len(rows):,} slowest shown. "
    "Open one on the Request page by its request_id."
)
st.dataframe(display.table(cols, rows), hide_index=True, width="stretch")
