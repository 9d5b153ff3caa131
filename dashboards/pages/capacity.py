"""Capacity: what a `budgetscope sweep` found, per tier: attainment, the tail TTFT and the stages' shares of the
tail against the offered rate, with the budgets, the capacity and the knee drawn in."""

import state
import streamlit as st

from budgetscope.analysis.capacity import RATE_UNIT, level
from budgetscope.analysis.capacity_charts import capacity_figure

ov, f, text, bpath = state.start_page("Capacity")
path = state.archive_path()
runs = state.sweep_runs(path)
if not runs:
    st.info(
        "This archive holds no sweep: record one with `budgetscope sweep URL --budgets B --archive A "
        "--rates 1,2,4,8` (docs/capacity.md), then open it here."
    )
    st.stop()
run = st.selectbox("Sweep run", runs[::-1], key="cap_run", help="Newest first") if len(runs) > 1 else runs[0]
res = state.capacity(path, text, run)
st.caption(
    f"Run `{run}` of {res['target'] or 'the target'}: {len(res['points'])} rates, {len(res['steps'])} steps. "
    "Every figure is the report's analysis of one step's time window; the sidebar filters do not apply here."
)
names = [t["name"] for t in res["tiers"] if any(t["name"] in p["tiers"] for p in res["points"])]
if not names:
    st.info("No tier of the budgets file has requests in this sweep.")
    st.stop()
tier = st.selectbox("Tier", names, key="cap_tier") if len(names) > 1 else names[0]
c = next(t for t in res["tiers"] if t["name"] == tier)
col1, col2, col3 = st.columns(3)
u = "req/s" if c["unit"] == RATE_UNIT else "in flight"
word = "rate" if c["unit"] == RATE_UNIT else "concurrency"
col = "rate/s" if c["unit"] == RATE_UNIT else "concurrency"
col1.metric(
    "Capacity",
    f"below the lowest {word}"
    if c["capacity"] is None
    else f"{'≥ ' if c['capacity_is_lower_bound'] else ''}{c['capacity']:g} {u}",
    help=f"The highest {word} below the first {word} that breaks the tier's budgets.",
)
col2.metric("Knee", "not found" if c["knee"] is None else f"{c['knee']:g} {u}", help=c["knee_reason"])
t = c["takeover"]
col3.metric(
    "Takes over past it",
    "n/a" if t is None else f"{t['stage']} {100 * t['share']:.0f}%",
    help="The dominant stage of the TTFT tail past the knee (or capacity), and its share there.",
)
(st.success if c["capacity_is_lower_bound"] else st.warning)(c["verdict"])
st.plotly_chart(capacity_figure(res, tier), key="cap_fig")
st.subheader(f"Per {word}")
rows = []
for p in res["points"]:
    pt = p["tiers"].get(tier)
    if pt is None:
        continue
    shares = pt["ttft_shares"] or {}
    rows.append(
        {
            col: f"{level(p):g}",
            "runs": pt["runs"],
            "requests": pt["requests"],
            "served ok/s": "n/a" if p["served_rps"] is None else f"{p['served_rps']:.2f}",
            "attainment": "n/a" if pt["attainment"] is None else f"{100 * pt['attainment']:.1f}%",
            f"{pt['ttft_key']} TTFT": state.ms(pt["ttft"]),
            **{
                f"{s} share": "—" if shares.get(s) is None else f"{100 * shares[s]:.0f}%"
                for s in ("queue", "prefill", "network")
            },
            "budgets": "keeps" if pt["keeps"] else "BREAKS",
        }
    )
st.table(rows)
st.subheader("The server's saturation signals, per step")
sig = []
for s in res["steps"]:
    g = s["signals"]
    sig.append(
        {
            col: f"{level(s):g}",
            "from": g.get("source") or "none",
            "batch mean": "—" if g.get("batch_mean") is None else f"{g['batch_mean']:.1f}",
            "batch max": g.get("batch_max", "—"),
            "queue max": g.get("queue_max", "—"),
            "KV max": "—" if g.get("kv_max") is None else f"{100 * g['kv_max']:.0f}%",
            "preemptions": g.get("preemptions", "—"),
        }
    )
st.table(sig)
if not bpath:
    st.caption("Opened without a budgets file: every tier without budgets (it keeps them at every rate).")
