"""SQL: read-only queries over the archive (sandboxed: no writes, no file or network access)."""

import csv
import io

import state
import streamlit as st

from budgetscope.query import QueryError, run_query

ov, f, text, bpath = state.start_page("SQL")
MAX_ROWS, TIMEOUT_S = 100_000, 30  # what one query may return and how long it may run: the page holds rows in memory
SHOWN = 10_000
st.caption(
    "One read-only SELECT over the archive: tables `requests`, `spans`, `engine_steps`, `gpu_samples`, "
    "`server_metrics`, `ingest_batches` (docs/archive.md). The sidebar filters do not apply here: write them "
    f"in the query. At most {MAX_ROWS:,} rows and {TIMEOUT_S} s a query."
)
DEFAULT = (
    "SELECT tier, count(*) AS requests, quantile_cont(ttft_ms, 0.99) AS p99_ttft_ms,\n"
    "       quantile_cont(e2e_ms, 0.99) AS p99_e2e_ms\nFROM requests GROUP BY tier ORDER BY tier"
)
sql = st.text_area("Query", DEFAULT, height=140, key="sql_text")
if st.button("Run", type="primary", key="sql_run") or "sql_ran" not in st.session_state:
    st.session_state["sql_ran"] = True
    try:
        res = run_query(state.plain_path(), sql, max_rows=MAX_ROWS, timeout_s=TIMEOUT_S)
        st.session_state["sql_result"] = (sql, res, None)
    except QueryError as e:
        st.session_state["sql_result"] = (sql, None, str(e))
ran, res, err = st.session_state["sql_result"]
if err:
    st.warning(f"The query did not run: {err}")
elif res is not None:
    more = (
        f"more than {MAX_ROWS:,} rows matched; the first {MAX_ROWS:,} are kept"
        if res.truncated
        else f"{len(res.rows):,} rows"
    )
    st.caption(more + (f"; the first {SHOWN:,} shown, all kept in the download" if len(res.rows) > SHOWN else ""))
    st.dataframe([dict(zip(res.columns, row)) for row in res.rows[:SHOWN]], hide_index=True, width="stretch")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(res.columns)
    w.writerows(res.rows)
    st.download_button(
        "Download CSV", buf.getvalue(), file_name="budgetscope-query.csv", mime="text/csv", key="sql_download"
    )
