"""SQL: read-only queries over the archive (sandboxed: no writes, no file, setting or network access), each in a
process of its own, so that no query can take the server, or another user's page, down with it."""

import csv
import io

import state
import streamlit as st

from budgetscope.query import QueryError
from budgetscope.query_limits import QueryLimits
from budgetscope.query_process import run_isolated

ov, f, text, bpath = state.start_page("SQL")
# what one query may use: the page holds its rows in memory, for each session
LIMITS = QueryLimits(max_rows=100_000, max_result_mb=64, timeout_s=30)
SHOWN = 10_000
st.caption(
    "One read-only SELECT over the archive: tables `requests`, `spans`, `engine_steps`, `gpu_samples`, "
    "`server_metrics`, `ingest_batches` (docs/archive.md). The sidebar filters do not apply here: write them "
    f"in the query. At most {LIMITS.max_rows:,} rows, {LIMITS.max_result_mb} MiB of them and {LIMITS.timeout_s:g} s "
    f"a query, in {LIMITS.memory_mb:,} MiB of memory; {state.QUERY_SLOTS} queries run at once on this server."
)
DEFAULT = (
    "SELECT tier, count(*) AS requests, quantile_cont(ttft_ms, 0.99) AS p99_ttft_ms,\n"
    "       quantile_cont(e2e_ms, 0.99) AS p99_e2e_ms\nFROM requests GROUP BY tier ORDER BY tier"
)
sql = st.text_area("Query", DEFAULT, height=140, key="sql_text")
if st.button("Run", type="primary", key="sql_run") or "sql_ran" not in st.session_state:
    st.session_state["sql_ran"] = True
    try:
        with state.query_slot(LIMITS.timeout_s):
            res = run_isolated(state.plain_path(), sql, LIMITS)
        st.session_state["sql_result"] = (sql, res, None)
    except QueryError as e:
        st.session_state["sql_result"] = (sql, None, str(e))
ran, res, err = st.session_state["sql_result"]
if err:
    st.warning(f"The query did not run: {err}")
elif res is not None:
    if res.oversize:
        more = f"the result passed {LIMITS.max_result_mb} MiB; the first {len(res.rows):,} rows are kept"
    elif res.truncated:
        more = f"more than {LIMITS.max_rows:,} rows matched; the first {LIMITS.max_rows:,} are kept"
    else:
        more = f"{len(res.rows):,} rows"
    st.caption(more + (f"; the first {SHOWN:,} shown, all kept in the download" if len(res.rows) > SHOWN else ""))
    st.dataframe([dict(zip(res.columns, row)) for row in res.rows[:SHOWN]], hide_index=True, width="stretch")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(res.columns)
    w.writerows(res.rows)
    st.download_button(
        "Download CSV", buf.getvalue(), file_name="budgetscope-query.csv", mime="text/csv", key="sql_download"
    )
