"""SQL: read-only queries over the archive (sandboxed: no writes, no file or network access)."""

import csv
import io

import streamlit as st

import state
from budgetscope.archive.query import QueryError, run_query

ov, f, text, bpath = state.start_page("SQL")
st.caption("Read-only SQL over the archive: tables `requests`, `spans`, `engine_steps`, `gpu_samples`, "
           "`ingest_batches` (docs/archive.md). The sidebar filters do not apply here: write them in the query.")
DEFAULT = ("SELECT tier, count(*) AS requests, quantile_cont(ttft_ms, 0.99) AS p99_ttft_ms,\n"
           "       quantile_cont(e2e_ms, 0.99) AS p99_e2e_ms\nFROM requests GROUP BY tier ORDER BY tier")
sql = st.text_area("Query", DEFAULT, height=140, key="sql_text")
if st.button("Run", type="primary", key="sql_run") or "sql_ran" not in st.session_state:
    st.session_state["sql_ran"] = True
    try:
        st.session_state["sql_result"] = (sql, run_query(state.plain_path(), sql), None)
    except QueryError as e:
        st.session_state["sql_result"] = (sql, None, str(e))
ran, res, err = st.session_state["sql_result"]
if err:
    st.warning(f"The query did not run: {err}")
elif res is not None:
    LIMIT = 10_000
    st.caption(f"{len(res.rows):,} rows" + (f"; the first {LIMIT:,} shown, all in the download" if len(res.rows) > LIMIT else ""))
    st.dataframe([dict(zip(res.columns, row)) for row in res.rows[:LIMIT]], hide_index=True, width="stretch")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(res.columns)
    w.writerows(res.rows)
    st.download_button("Download CSV", buf.getvalue(), file_name="budgetscope-query.csv", mime="text/csv",
                       key="sql_download")
