"""The budgetscope dashboard: `budgetscope dashboard --archive A --budgets B` runs it. Layout only; every
number comes from budgetscope.analysis (see dashboards/state.py)."""

import sys
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for `import state` from the pages

st.set_page_config(page_title="budgetscope", page_icon="⏱", layout="wide")

PAGES = Path(__file__).resolve().parent / "pages"
nav = st.navigation(
    [
        st.Page(PAGES / "budgets.py", title="Budgets", default=True),
        st.Page(PAGES / "breakdown.py", title="Breakdown"),
        st.Page(PAGES / "tail_explorer.py", title="Tail explorer"),
        st.Page(PAGES / "timeline.py", title="Timeline / postmortem"),
        st.Page(PAGES / "request.py", title="Request"),
        st.Page(PAGES / "sql.py", title="SQL"),
        st.Page(PAGES / "what_if.py", title="What if"),
        st.Page(PAGES / "capacity.py", title="Capacity"),
    ]
)
nav.run()
