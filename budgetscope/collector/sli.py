"""The live SLIs of `collect --budgets`: per tier and budgeted figure, requests judged and requests within the
budget (Prometheus counters), and per tier and figure a histogram of the judged value whose bucket bounds include
every budget of the file, served on `GET /metrics` beside the collector's own figures.

Judging is `budgetscope.analysis.judging`'s, the SQL `report` runs: a failed, rejected or timed-out request is a
miss; a cancelled one, or one that ended ok without the figure (unknown: neither met nor missed), is not judged. The rows come from the archive's commits (`DirectoryArchive.on_publish`): the
`requests` rows each commit derived, and the traces whose earlier rows it replaced.

Each request is counted once. A trace's rows wait `settle_s` from their first derivation (late spans of the same
request — the client's span, exported after the server's — re-derive it meanwhile: the newest rows replace the
waiting ones), then they are counted and let go. A trace re-derived after it was counted (its earlier rows were
replaced, and none of them waits) is not counted again (a counter never goes down):
`budgetscope_sli_rederived_after_count_total` counts those traces, so that the difference from `report` is never
silent. Counters count since the collector started, as Prometheus counters do; a restart resets them (the traces
waiting at a stop are counted by no one).
"""

from __future__ import annotations

import threading
import time

from budgetscope.analysis import judging, slo
from budgetscope.analysis.budgets import METRICS, Budgets, TierBudget
from budgetscope.analysis.coverage import SETTLE_S
from budgetscope.analysis.judging import CLIENT_METRIC, METRIC_FIGURES, STAGE_COLUMNS
from budgetscope.analysis.selection import Selection

BASE_BOUNDS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""The histogram's bucket bounds (s) besides the budgets: from 5 ms (a TPOT) to 5 minutes (a long generation)."""
HISTOGRAM_FIGURES = (*METRIC_FIGURES, *STAGE_COLUMNS)
"""The figures with a histogram per tier: TTFT, TPOT, E2E and every stage (budgeted or not)."""
_KEYS = ("tier", "model", "tenant", "service_name", "source")  # what a tier's `match` may filter on
COLUMNS = (
    "outcome",
    *_KEYS,
    *(c for m in METRICS for c in (m, CLIENT_METRIC[m])),
    *STAGE_COLUMNS.values(),
)
"""The `requests` columns the judging and the histograms read."""


def bounds_ms(budgets: Budgets) -> list[float]:
    """The histogram's bucket bounds in ms: BASE_BOUNDS_S and every budget of the file, sorted, without +Inf."""
    found = {b * 1000 for b in BASE_BOUNDS_S}
    for tb in budgets.tiers:
        found |= set(judging.budgeted_figures(tb).values())
    return sorted(found)


class SliCounters:
    """The counters and histograms of one collector. `published` and `settle` run on the archive's writer thread;
    `render` (a scrape) on any thread."""

    def __init__(self, budgets: Budgets, settle_s: float = SETTLE_S):
        # imported on use: duckdb 153 ms to import (`collect` without --budgets never needs this connection)
        import duckdb

        self.budgets = budgets
        self.settle_s = settle_s
        self.bounds_ms = bounds_ms(budgets)
        self._con = duckdb.connect(":memory:")
        self._con.execute(
            "CREATE TABLE waiting (first_ns BIGINT, trace_id VARCHAR, "
            + ", ".join(f"{c} {'VARCHAR' if c in ('outcome', *_KEYS) else 'DOUBLE'}" for c in COLUMNS)
            + ")"
        )
        self._lock = threading.Lock()
        self.counts = {  # (tier, figure) → [judged, within]
            (tb.name, f): [0, 0] for tb in budgets.tiers for f in judging.budgeted_figures(tb)
        }
        width = len(self.bounds_ms)
        # (tier, figure) → [requests ≤ each bound..., count, sum of values (ms)]
        self.histograms = {(tb.name, f): [0] * width + [0, 0.0] for tb in budgets.tiers for f in HISTOGRAM_FIGURES}
        self.rederived_after_count = 0
        self.waiting = 0  # rows waiting, as a scrape reads it
        self._waiting, self._oldest_ns = 0, 0  # the same and their oldest first time, for the writer thread
        self._sql, self._params = self._settle_sql()
        self._hist_sql, self._hist_params = self._histogram_sql()

    # -- the writer thread -----------------------------------------------------------------------------------
    def published(self, con) -> None:
        """A commit of the archive's working set `con` published: take the rows of the traces it derived (and note
        those it re-derived after they were counted)."""
        cols = ", ".join(COLUMNS)
        rows = con.sql(
            f"SELECT trace_id, {cols} FROM requests WHERE trace_id IN (SELECT trace_id FROM bs_derived)"
        ).to_arrow_table()
        derived = con.sql("SELECT DISTINCT trace_id FROM bs_derived").to_arrow_table()
        replaced = con.sql("SELECT DISTINCT trace_id FROM bs_superseded").to_arrow_table()
        self.observe(rows, derived, replaced)

    def observe(self, rows, derived, replaced, now_ns: int | None = None) -> None:
        """Arrow tables: `rows` (trace_id and COLUMNS) of the traces `derived` (trace_id), of which `replaced`
        (trace_id) had rows before. A trace that had rows and has none waiting was counted: it is left out."""
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        con = self._con
        late = 0
        if derived.num_rows:
            con.register("bs_rows", rows)
            con.register("bs_traces", derived)
            con.register("bs_replaced", replaced)
            insert = f"INSERT INTO waiting SELECT ?, r.trace_id, {', '.join(f'r.{c}' for c in COLUMNS)} FROM bs_rows r"
            try:
                if not replaced.num_rows:  # the usual commit: new traces only (a waiting one had rows: replaced)
                    con.execute(insert, [now_ns]).fetchall()
                else:
                    late = self._replace(insert, now_ns)
            finally:
                for name in ("bs_rows", "bs_traces", "bs_replaced"):
                    con.unregister(name)
            self._recount()
        with self._lock:
            self.rederived_after_count += late
        self.settle(now_ns)

    def _replace(self, insert: str, now_ns: int) -> int:
        """Insert the rows of traces derived again: a waiting trace keeps its first time; one that had rows and has
        none waiting was counted, and is left out. Returns those."""
        con = self._con
        con.execute("BEGIN TRANSACTION")
        try:
            ((late,),) = con.execute(
                "SELECT count(*) FROM bs_replaced r WHERE NOT EXISTS (SELECT 1 FROM waiting w WHERE w.trace_id = "
                "r.trace_id)"
            ).fetchall()
            con.execute(
                "CREATE OR REPLACE TEMP TABLE bs_first AS SELECT trace_id, min(first_ns) AS first_ns FROM waiting "
                "WHERE trace_id IN (SELECT trace_id FROM bs_traces) GROUP BY 1"
            )
            con.execute("DELETE FROM waiting WHERE trace_id IN (SELECT trace_id FROM bs_traces)").fetchall()
            con.execute(
                insert.replace("SELECT ?,", "SELECT coalesce(f.first_ns, ?),")
                + """ LEFT JOIN bs_first f ON f.trace_id = r.trace_id
                WHERE f.first_ns IS NOT NULL OR NOT EXISTS (SELECT 1 FROM bs_replaced x WHERE x.trace_id = r.trace_id)""",
                [now_ns],
            ).fetchall()
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return late

    def _recount(self) -> None:
        ((n, oldest),) = self._con.execute("SELECT count(*), min(first_ns) FROM waiting").fetchall()
        self._waiting, self._oldest_ns = n, oldest
        with self._lock:
            self.waiting = n

    def settle(self, now_ns: int | None = None) -> None:
        """Count the rows that have waited `settle_s` and let them go (nothing to do, no SQL: most calls)."""
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        cutoff = now_ns - int(self.settle_s * 1e9)
        if not self._waiting or self._oldest_ns > cutoff:
            return
        con = self._con
        (row,) = con.execute(self._sql, [*self._params, cutoff]).fetchall()
        binned = con.execute(self._hist_sql, [*self._hist_params, cutoff]).fetchall()
        con.execute("DELETE FROM waiting WHERE first_ns <= ?", [cutoff]).fetchall()
        self._recount()
        n = len(self.bounds_ms)
        histograms = list(self.histograms.values())
        with self._lock:
            for i, got in enumerate(self.counts.values()):
                got[0] += row[2 * i]
                got[1] += row[2 * i + 1]
            for h, bucket, count, total in binned:
                got = histograms[h]
                for k in range(bucket, n):  # cumulative: a value under bound `bucket` is under every later one
                    got[k] += count
                got[n] += count
                got[n + 1] += total

    def _settle_sql(self) -> tuple[str, list]:
        """The statement over the rows due that counts, per tier and budgeted figure, the judged requests and those
        within the budget (judging.py's SQL). `?` last: the cutoff."""
        aggs, params = [], []
        members = {tb.name: _member(tb) for tb in self.budgets.tiers}
        by_name = {tb.name: tb for tb in self.budgets.tiers}
        for tier, f in self.counts:
            tb, (cond, cond_params) = by_name[tier], members[tier]
            for what in (judging.judged_sql(tb, f), judging.within_sql(tb, f)):
                aggs.append(f"count_if({cond} AND ({what}))")
                params += cond_params
        return f"SELECT {', '.join(aggs)} FROM waiting WHERE first_ns <= ?", params

    def _histogram_sql(self) -> tuple[str, list]:
        """The statement over the rows due that bins every histogram's values: (the histogram's index in
        `histograms`, the index of the first bound at or over the value (len(bounds_ms): over every one),
        requests, sum of the values). Each row of a tier's ok requests gives one value a histogram figure, the
        one it was judged by (NULL and NaN left out), binned once. `?` last: the cutoff."""
        entries, params = [], []
        members = {tb.name: _member(tb) for tb in self.budgets.tiers}
        for h, (tier, f) in enumerate(self.histograms):
            cond, cond_params = members[tier]
            value = judging.value_sql(f)
            entries.append(
                f"{{'h': {h}, 'v': CASE WHEN {cond} AND outcome = '{judging.OK}' AND NOT isnan({value}) "
                f"THEN {value} END}}"
            )
            params += cond_params
        bucket = (
            "CASE "
            + " ".join(f"WHEN x.v <= {b!r} THEN {i}" for i, b in enumerate(self.bounds_ms))
            + f" ELSE {len(self.bounds_ms)} END"
        )
        return (
            f"SELECT x.h, {bucket}, count(*), sum(x.v) FROM (SELECT unnest([{', '.join(entries)}]) AS x "
            "FROM waiting WHERE first_ns <= ?) WHERE x.v IS NOT NULL GROUP BY 1, 2",
            params,
        )

    # -- a scrape ----------------------------------------------------------------------------------------------
    def families(self) -> list[tuple[str, str, str, list[tuple[str, float]]]]:
        """(name, type, help, [(labels, value)]) of every family, for the exposition (self_metrics.py)."""
        with self._lock:
            counts = {k: list(v) for k, v in self.counts.items()}
            hists = {k: list(v) for k, v in self.histograms.items()}
            late, waiting = self.rederived_after_count, self.waiting
        judged = [(labels(tier=t, figure=f), v[0]) for (t, f), v in counts.items()]
        within = [(labels(tier=t, figure=f), v[1]) for (t, f), v in counts.items()]
        buckets = []
        for (t, f), v in hists.items():
            n = len(self.bounds_ms)
            for b, c in zip(self.bounds_ms, v[:n]):
                buckets.append((f"_bucket{labels(tier=t, figure=f, le=_le(b))}", c))
            buckets.append((f"_bucket{labels(tier=t, figure=f, le='+Inf')}", v[n]))
            buckets.append((f"_sum{labels(tier=t, figure=f)}", round(v[n + 1] / 1000, 9)))
            buckets.append((f"_count{labels(tier=t, figure=f)}", v[n]))
        objective = [(labels(tier=tb.name), tb.percentile / 100) for tb in self.budgets.tiers]
        return [
            (
                slo.JUDGED,
                "counter",
                "Requests judged against a budget (failed, or ended ok with the figure known), by tier and budgeted "
                "figure.",
                judged,
            ),
            (
                slo.WITHIN,
                "counter",
                "Judged requests that ended ok within the budget, by tier and budgeted figure.",
                within,
            ),
            (
                slo.DURATION,
                "histogram",
                "The figure each ok request was judged by (client's where it has it), by tier and figure (TTFT, "
                "TPOT, E2E, each stage); the bounds include every budget.",
                buckets,
            ),
            (
                slo.OBJECTIVE,
                "gauge",
                "The share of judged requests each budget promises (percentile / 100).",
                objective,
            ),
            (
                slo.LATE,
                "counter",
                "Traces re-derived by late spans after their requests were counted (not counted again).",
                [("", late)],
            ),
            (slo.PENDING, "gauge", "Request rows waiting to settle before they are counted.", [("", waiting)]),
        ]


def _member(tb: TierBudget) -> tuple[str, list]:
    own = Selection(tb.filters)
    return ("(" + " AND ".join(own.clauses) + ")" if own.clauses else "true"), own.params


def _le(ms: float) -> str:
    """A bound in ms as the `le` label in seconds: 250 → `0.25`."""
    return repr(ms / 1000).removesuffix(".0")


def escape(value: str) -> str:
    """A label value in the text format: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels(**kv: str) -> str:
    """`{k="v",...}` in the text format (values escaped), `""` without any."""
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in kv.items()) + "}" if kv else ""


__all__ = ["SliCounters", "bounds_ms", "labels", "escape", "SETTLE_S", "COLUMNS"]
