"""The report's scans of `requests`, every tier at once: three statements whatever the number of tiers.

1. `counts`: requests by tier, outcome, client first-token definition and span coverage, with each tier's counts
   (its requests, client spans, attainment, server-only figures) as filtered counts: the tiers' counts, the
   unbudgeted tiers and the coverage from one scan;
2. `quantiles`: every tier's percentiles of its figures and stages (`quantile_cont ... FILTER (WHERE <tier>)`);
3. `splits`: every tier's tail and body (selection.split_class against its quantile and median) by the contrast's
   dimensions: the attribution's means and the contrast's mixes both come from these groups.

A tier is a condition on the rows (`Tiers.member`), so tiers that overlap are each counted whole. On DuckDB one
statement with a filter per tier costs what a statement per tier did; on Spark every statement has a fixed cost
and a pass over the rows, so three statements for all tiers instead of four a tier is most of the report's time
(docs/benchmarks.md, "Spark report").
"""

from __future__ import annotations

import budgetscope.analysis.attribution as attribution
from budgetscope.analysis.budgets import METRICS, TierBudget
from budgetscope.analysis.contrast import DIMENSIONS
from budgetscope.analysis.judging import CANCELLED, OK, figure_column, slo_judgement
from budgetscope.analysis.selection import BODY, TAIL, Selection, split_class

# A cancelled request is the client's choice (it left, or a benchmark ended with it in flight): it is neither a
# success nor a failure of the server, so attainment and the error rate leave it out (judging.py). Every other
# outcome that is not ok (error, rejected, timeout) is a failure.


SAMPLED_SOURCES = {
    "llmd": "llm-d samples whole traces by trace id (parent-based ratio, OTEL_TRACES_SAMPLER_ARG, 0.1 by default)"
}
"""Sources whose requests reach the archive sampled, and how: their percentiles are over the sampled requests and
their counts are the sampled ones (the spans do not say the ratio)."""


def pkey(p: float) -> str:
    """99.0 → "p99", 99.9 → "p99.9"."""
    return f"p{p:g}"


class Tiers:
    """The rows a report reads (`common`: its time range and filters) and each tier's condition on them
    (`member`: SQL and its parameters; "true" for a tier that matches every row)."""

    def __init__(
        self,
        tiers: list[TierBudget],
        since_ns: int | None,
        until_ns: int | None,
        filters: dict | None,
        without: tuple[str, list] | None = None,
    ):
        self.common = Selection({}, since_ns, until_ns, filters, without)
        self.member: list[tuple[str, list]] = []
        for tb in tiers:
            own = Selection(tb.filters)
            self.member.append(("(" + " AND ".join(own.clauses) + ")" if own.clauses else "true", own.params))


def attainment_condition(tb: TierBudget | None) -> str:
    """A request that ended ok and met every request-level SLO (`slo_judgement`'s `met`)."""
    return slo_judgement(tb)["met"]


_TIER_COUNTS = (
    "true",
    "has_client_span",
    "met",  # the tier's judgement (slo_judgement)
    "client_ttft_ms IS NULL AND ttft_ms IS NOT NULL",
    "client_e2e_ms IS NULL AND e2e_ms IS NOT NULL",
    "judged",
    *(f"{k}:{m}" for m in METRICS for k in ("met", "judged")),
    "len(violations) > 0",
    *(f"{col} IS NOT NULL" for col in attribution.WHERE_SEEN.values()),
    *(f"source = '{src}'" for src in SAMPLED_SOURCES),
)
"""Each tier's counts in `counts`' one scan: requests, with a client span, met, with a server-only TTFT and E2E,
judged, each metric's met and judged, those that break an invariant of their format (derive/invariants.py), those
with each optional stage (attribution.WHERE_SEEN), and those of each sampled source (SAMPLED_SOURCES)."""
_OPTIONAL_AT = len(_TIER_COUNTS) - len(attribution.WHERE_SEEN) - len(SAMPLED_SOURCES)
"""Where the optional stages' and the sampled sources' counts start among a tier's counts."""


def counts(con, tiers: Tiers, judged_by: list[TierBudget | None]) -> tuple[list[dict], dict, dict]:
    """(each tier's counts, requests by `tier` value, coverage) of the report's rows, from one scan.

    A tier's counts: requests by outcome, those with a client span, those with a server TTFT (E2E) but no client
    one, attainment and the error rate (None without a request that is not cancelled), and the ok requests with
    a client span by the client's first-token definition (None: a row written before the column). `judged_by`:
    each tier's budgets for attainment (None: no SLO but ending ok)."""
    aggs, params = [], []
    for (cond, cond_params), tb in zip(tiers.member, judged_by):
        judge = slo_judgement(tb)
        for c in _TIER_COUNTS:
            # the judgement's counts by name (an unbudgeted metric's: none), the others as written
            sql = judge.get(c, "false") if c in ("met", "judged") or ":" in c else c
            aggs.append(f"count_if({cond} AND ({sql}))")
            params += cond_params
    rows = con.execute(
        f"""
        SELECT tier, outcome, client_first_token_definition, server_span_id IS NOT NULL, has_client_span, count(*)
               {"".join(", " + a for a in aggs)}
        FROM requests {tiers.common.where()} GROUP BY 1, 2, 3, 4, 5""",
        [*params, *tiers.common.params],
    ).fetchall()
    by_tier: dict = {}
    cov = {"requests": 0, "with_server_spans": 0, "with_client_spans": 0, "with_both": 0}
    for tier, _, _, server, client, n, *_ in rows:
        by_tier[tier] = by_tier.get(tier, 0) + n
        cov["requests"] += n
        cov["with_server_spans"] += n if server else 0
        cov["with_client_spans"] += n if client else 0
        cov["with_both"] += n if server and client else 0
    width = len(_TIER_COUNTS)
    out = []
    for j in range(len(tiers.member)):
        at = 6 + j * width
        grouped: dict[tuple, list[int]] = {}  # (outcome, definition) → the tier's counts
        for r in rows:
            got = grouped.setdefault((r[1], r[2]), [0] * width)
            for i in range(width):
                got[i] += r[at + i] or 0
        out.append(_tier_counts([(o, d, *c) for (o, d), c in sorted(grouped.items(), key=_outcome_order) if c[0]]))
    return out, dict(sorted(by_tier.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))), cov


def _outcome_order(item) -> tuple:
    (outcome, definition), _ = item
    return (outcome is None, outcome or "", definition is None, definition or "")


def _tier_counts(rows: list[tuple]) -> dict:
    """A tier's counts from its (outcome, definition, *the _TIER_COUNTS counts) rows."""
    n = sum(r[2] for r in rows)
    ok_rows = [r for r in rows if r[0] == OK]
    ok = sum(r[2] for r in ok_rows)
    judged = n - sum(r[2] for r in rows if r[0] == CANCELLED)
    outcomes: dict[str, int] = {}
    for r in rows:
        outcomes[r[0]] = outcomes.get(r[0], 0) + r[2]
    # the share of the judged requests that attained: exactly avg(1.0 if attained else 0.0), as an exact ratio
    met, over = sum(r[4] for r in rows), sum(r[7] for r in rows)
    by_figure = {}
    for i, m in enumerate(METRICS):
        got, of = sum(r[8 + 2 * i] for r in rows), sum(r[9 + 2 * i] for r in rows)
        by_figure[m] = {"met": got, "judged": of, "attainment": got / of if of else None}
    definitions: dict = {}
    for r in ok_rows:
        if r[3]:
            definitions[r[1]] = definitions.get(r[1], 0) + r[3]
    at = 2 + _OPTIONAL_AT  # the last counts: the optional stages' ok rows, then each sampled source's rows
    seen = [s for i, s in enumerate(attribution.WHERE_SEEN) if sum(r[at + i] for r in ok_rows)]
    at += len(attribution.WHERE_SEEN)
    by_source = {src: sum(r[at + i] for r in rows) for i, src in enumerate(SAMPLED_SOURCES)}
    sampled = {src: k for src, k in by_source.items() if k}
    return {
        "stages_seen": seen,
        "sampled": sampled,
        "n": n,
        "ok": ok,
        "judged": judged,
        "client": sum(r[3] for r in ok_rows),
        "server_only": {"ttft": sum(r[5] for r in ok_rows), "e2e": sum(r[6] for r in ok_rows)},
        "outcomes": outcomes,
        "attainment": met / over if over else None,
        "attainment_over": over,
        "attainment_by_figure": by_figure,
        "misread": sum(r[8 + 2 * len(METRICS)] for r in rows),
        "error_rate": (judged - ok) / judged if judged else None,
        "definitions": definitions,
    }


def _valid(col: str) -> str:
    """The column with NaN as NULL, which aggregates leave out (cheaper than a FILTER clause)."""
    return f"nullif({col}, 'NaN'::DOUBLE)"


def _filtered(agg: str, cond: str) -> str:
    return agg if cond == "true" else f"{agg} FILTER (WHERE {cond})"


def quantiles(con, tiers: Tiers, wants: dict[int, tuple[list, dict]]) -> dict[int, tuple[list[dict], dict]]:
    """One scan of the report's ok requests for every tier j of `wants` (NaN and NULL left out of every figure):
    j → (groups, splits), each group (columns name → column, percentiles), each split kind → (metric column,
    percentile). Returns j → (per group: name → {pXX: value}; per split: (requests with the metric, its quantile,
    its median)), the attribution's tail and body boundaries. A group that has the split's column at both
    percentiles gives them (the same aggregate over the same rows)."""
    exprs: list[str] = []
    params: list = []
    at: dict[tuple[int, str], int] = {}

    def agg(j: int, sql: str) -> int:  # the position of a tier's aggregate in the row, each computed once
        if (j, sql) not in at:
            cond, cond_params = tiers.member[j]
            at[(j, sql)] = len(exprs)
            exprs.append(_filtered(sql, cond))
            params.extend(cond_params if cond != "true" else [])
        return at[(j, sql)]

    def quantile(col: str, pcts: list[float]) -> str:
        return f"quantile_cont({_valid(col)}, {[p / 100 for p in pcts]})"

    plan = {}
    for j, (groups, splits) in wants.items():
        group_at = [[(name, agg(j, quantile(col, pcts))) for name, col in columns.items()] for columns, pcts in groups]
        split_at = {}
        for kind, (col, pct) in splits.items():
            pcts = next(
                (pcts for columns, pcts in groups if col in columns.values() and pct in pcts and 50.0 in pcts),
                [pct, 50.0],
            )
            split_at[kind] = (
                agg(j, f"count({_valid(col)})"),
                agg(j, quantile(col, pcts)),
                pcts.index(pct),
                pcts.index(50.0),
            )
        plan[j] = (group_at, split_at)
    if not exprs:
        return {}
    (row,) = con.execute(
        f"SELECT {', '.join(exprs)} FROM requests {tiers.common.where(OK_ROWS)}", [*params, *tiers.common.params]
    ).fetchall()
    out = {}
    for j, (group_at, split_at) in plan.items():
        figures = []
        for (columns, pcts), positions in zip(wants[j][0], group_at):
            figs = {}
            for name, i in positions:
                values = row[i]
                figs[name] = {
                    pkey(p): (_nan_to_none(v) if values is not None else None)
                    for p, v in zip(pcts, values or [None] * len(pcts))
                }
            figures.append(figs)
        bounds = {}
        for kind, (n_at, i, qi, mi) in split_at.items():
            values = row[i]
            bounds[kind] = (row[n_at], values[qi], values[mi]) if values is not None else (row[n_at], None, None)
        out[j] = (figures, bounds)
    return out


OK_ROWS = "outcome = 'ok'"


def _nan_to_none(x):
    return None if x is None or x != x else x


class Split:
    """One tier's tail and body of one metric: kind ("ttft" or "e2e"), the metric column, its components (stage →
    column), the tail's threshold (the metric's quantile) and the median."""

    def __init__(self, tier: int, kind: str, metric: str, components: dict[str, str], threshold: float, median: float):
        self.tier, self.kind, self.metric, self.components = tier, kind, metric, components
        self.threshold, self.median = threshold, median


class SplitCounts:
    """What `splits` found for one Split: tail and body sizes, the tail's smallest metric, each component's sum
    over the tail and over the body (NULL as 0) and how many of their rows know it, the metric's own sums, and the
    contrast's (dimension, value) → [tail, body] counts of the rows whose metric is known."""

    def __init__(self, n_components: int):
        self.n_tail = self.n_body = 0
        self.tail_min: float | None = None
        self.tail_sums = [0.0] * n_components
        self.body_sums = [0.0] * n_components
        self.known = [0] * n_components  # rows of the tail or body where the component is not NULL
        self.tail_metric = self.body_metric = 0.0
        self.mixes: dict[tuple[str, str], list[int]] = {}

    def by_dimension(self) -> dict[str, list[tuple[str, int, int]]]:
        """Dimension → [(value, requests in the tail, requests in the body)], as contrast.mixes gives them."""
        out: dict[str, list[tuple[str, int, int]]] = {}
        for (dim, val), (tail, body) in self.mixes.items():
            out.setdefault(dim, []).append((val, tail, body))
        return out


def splits(con, tiers: Tiers, wanted: list[Split]) -> list[SplitCounts]:
    """Every Split's tail and body sums and contrast counts from one scan of the report's ok requests: the rows are
    grouped by the contrast's dimensions and every split's class (selection.split_class, NULL outside its tier),
    and the groups (one per combination that occurs) summed up here."""
    if not wanted:
        return []
    classes, params = [], []
    for s in wanted:
        cond, cond_params = tiers.member[s.tier]
        classes.append(f"CASE WHEN {cond} THEN {split_class(s.metric, '?', '?')} END")
        params += [*cond_params, s.threshold, s.median, s.threshold, s.median]
    metrics = list(dict.fromkeys(s.metric for s in wanted))
    columns = list(dict.fromkeys(c for s in wanted for c in s.components.values()))
    ds = [f"d{i}" for i in range(len(DIMENSIONS))]
    cs = [f"c{j}" for j in range(len(wanted))]
    inner = ", ".join(
        [f"{expr} AS {d}" for d, expr in zip(ds, DIMENSIONS.values())] + [f"{c} AS {n}" for c, n in zip(classes, cs)]
    )
    aggs = [
        "count(*)",
        *(f"min({m})" for m in metrics),
        *(f"sum(coalesce({c}, 0))" for c in columns),
        *(f"count({c})" for c in columns),
        *(f"sum({m})" for m in metrics),
    ]
    rows = con.execute(
        f"""SELECT {", ".join(ds + cs)}, {", ".join(aggs)}
        FROM (SELECT *, {inner} FROM requests {tiers.common.where(OK_ROWS)})
        GROUP BY {", ".join(ds + cs)}""",
        [*params, *tiers.common.params],
    ).fetchall()
    names = list(DIMENSIONS)
    nd, nc = len(ds), len(cs)
    n_at, min_at, sum_at = nd + nc, nd + nc + 1, nd + nc + 1 + len(metrics)
    known_at, metric_at = sum_at + len(columns), sum_at + 2 * len(columns)
    out = [SplitCounts(len(s.components)) for s in wanted]
    for r in rows:
        n = r[n_at]
        for j, (s, got) in enumerate(zip(wanted, out)):
            c = r[nd + j]
            if c is None:
                continue
            in_tail, in_body = c in TAIL, c in BODY
            sums = [r[sum_at + columns.index(col)] for col in s.components.values()]
            whole = r[metric_at + metrics.index(s.metric)]
            if in_tail or in_body:
                got.known = [a + r[known_at + columns.index(col)] for a, col in zip(got.known, s.components.values())]
            if in_tail:
                got.n_tail += n
                low = r[min_at + metrics.index(s.metric)]
                got.tail_min = low if got.tail_min is None else min(got.tail_min, low)
                got.tail_sums = [a + b for a, b in zip(got.tail_sums, sums)]
                got.tail_metric += whole
            if in_body:
                got.n_body += n
                got.body_sums = [a + b for a, b in zip(got.body_sums, sums)]
                got.body_metric += whole
            for i, name in enumerate(names):
                x = got.mixes.setdefault((name, r[i]), [0, 0])
                x[0] += n if in_tail else 0
                x[1] += n if in_body else 0
    return out


def split_plan(
    tier: int, client_for: dict[str, bool], bounds: dict, content_gap: bool = False, seen: tuple[str, ...] = ()
) -> list[Split]:
    """The Splits of one tier: each kind with requests that have its metric (`content_gap`: the client TTFT of some
    of them waits for the first non-empty chunk, a part of its own; `seen`: the stages of attribution.WHERE_SEEN
    some of its ok requests have)."""
    out = []
    for kind, (n, tq, med) in bounds.items():
        if n:
            figure = attribution.FIGURES[kind][0 if client_for[kind] else 1]
            parts = attribution.components(kind, client_for[kind], content_gap, seen)
            out.append(Split(tier, kind, figure, parts, tq, med))
    return out


__all__ = [
    "Tiers",
    "counts",
    "quantiles",
    "splits",
    "split_plan",
    "Split",
    "SplitCounts",
    "attainment_condition",
    "slo_judgement",
    "figure_column",
]
