"""Request: one request as a Gantt of its client and server spans, and its token gaps."""

import state
import streamlit as st

from budgetscope.analysis import charts

ov, f, text, bpath = state.start_page("Request")
path = state.archive_path()
c1, c2 = st.columns([1, 2])
rank_by = c1.selectbox(
    "Pick among the slowest by",
    ["e2e_ms", "ttft_ms", "client_e2e_ms", "client_ttft_ms", "queue_ms", "tpot_ms"],
    key="rq_rank",
)
slow = state.slowest(path, f, rank_by)
options = [rid for rid, _ in slow]
picked = (
    c2.selectbox(
        "Slowest requests of the selection",
        options,
        key="rq_pick",
        format_func=lambda r: f"{r}  ({state.ms(dict(slow)[r])})",
    )
    if options
    else None
)
typed = st.text_input("…or a request_id / trace_id", key="rq_id").strip()
key = typed or picked
if not key:
    st.info(f"No ok request with a {rank_by} in this selection.")
    st.stop()
view = state.one_request(path, key)
if view is None:
    st.warning(f"No request with request_id or trace_id {key!r} in this archive.")
    st.stop()
r = view["request"]
st.markdown(
    f"**{r['request_id']}** · tier {r['tier']} · model {r['model']} · tenant {r['tenant'] or '—'} · "
    f"{r['service_name']} · outcome **{r['outcome']}** · arrived {state.utc(r['arrival_ns'])}"
)
c = st.columns(5)
c[0].metric("TTFT (server)", state.ms(r["ttft_ms"]))
c[1].metric("TTFT (client)", state.ms(r["client_ttft_ms"]))
c[2].metric("E2E (server)", state.ms(r["e2e_ms"]))
c[3].metric("E2E (client)", state.ms(r["client_e2e_ms"]))
c[4].metric(
    "tokens in / cached / out",
    f"{r['input_tokens']} / {r['cached_tokens'] if r['cached_tokens'] is not None else '?'} / {r['output_tokens']}",
)
for m in view["missing"]:
    st.caption("ℹ️ " + m)
st.plotly_chart(charts.gantt_figure(view), key="rq_gantt")
if any(t["gap_ms"] is not None for t in view["tokens"]):
    st.subheader("Token gaps")
    st.plotly_chart(charts.token_gaps_figure(view), key="rq_gaps")
with st.expander("Stage columns of this request"):
    st.dataframe([{k: v for k, v in r.items() if k.endswith("_ms") and not isinstance(v, list)}], hide_index=True)
