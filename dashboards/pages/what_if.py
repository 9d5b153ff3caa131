"""What if: edit a tier's budgets here and see its attainment, breaches and verdict move."""

import state
import streamlit as st

from budgetscope.analysis import display
from budgetscope.analysis.budgets import BUDGETABLE_STAGES, METRICS, BudgetError
from budgetscope.analysis.overview import headline
from budgetscope.analysis.verdict import LABEL
from budgetscope.analysis.whatif import edit_tier, to_toml

ov, f, text, bpath = state.start_page("What if")
path = state.archive_path()
rep = state.report(path, text, f, bpath)
if not state.tier_names(rep)[0]:
    st.info("No tier to show: the filters leave out every tier of the budgets file.")
    st.stop()
tier, before = state.pick_tier(st, rep, path, text, f, "wi_tier")
tb = state.tier_budget(text, tier)
st.caption("0 means no budget. Edits stay in this page; the budgets file is not changed.")
c = st.columns(4)
pct = c[0].number_input("percentile", 1.0, 99.99, tb.percentile, step=0.5, key=f"wi_pct_{tier}")
metrics = {
    m: c[i + 1].number_input(
        f"{LABEL[m]} budget (ms)", 0.0, 1e9, float(getattr(tb, m) or 0), step=10.0, key=f"wi_{m}_{tier}"
    )
    for i, m in enumerate(METRICS)
}
sc = st.columns(len(BUDGETABLE_STAGES))
stages = {
    s: sc[i].number_input(f"{s} (ms)", 0.0, 1e9, float(tb.stages.get(s, 0)), step=10.0, key=f"wi_s_{s}_{tier}")
    for i, s in enumerate(BUDGETABLE_STAGES)
}
try:
    edited = edit_tier(state.budgets_from(text) or state.parse_budgets(f"[tiers.{tier}]\n"), tier, pct, metrics, stages)
except BudgetError as e:
    st.warning(f"These budgets do not hold together: {e}")
    st.stop()
after = next(e for e in state.report(path, to_toml(edited), f)["tiers"] if e["name"] == tier)


def att(e):
    return None if e["attainment"] is None else 100 * e["attainment"]


c1, c2, c3 = st.columns(3)
c1.metric(
    "Attainment", "n/a" if att(after) is None else f"{att(after):.1f}%", display.change(att(before), att(after), "pts")
)
c2.metric(
    "Budgets broken",
    len(after["breaches"]),
    display.change(len(before["breaches"]), len(after["breaches"]), "", digits=0),
    delta_color="inverse",
)
c3.metric("Status", after["status"])
state.verdict_box(after)
st.markdown(after["verdict"])
with st.expander("Before (the budgets file)"):
    st.markdown(headline(before))
    st.markdown(before["verdict"])
with st.expander("These budgets as TOML"):
    st.code(to_toml(edited), language="toml")
