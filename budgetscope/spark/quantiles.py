"""Exact `quantile_cont` on Spark by selection, without Spark's `percentile`.

Spark's exact `percentile` keeps a hash map of every distinct value (boxed) per task and merges the maps in one
task: over 1M requests it was most of the report's time (docs/benchmarks.md, "Spark report: the profile"). A
statement whose projections are global aggregates (no GROUP BY) with `quantile_cont` among them is run instead as

1. a histogram: every quantile's values (one row per value, `explode`) counted by bucket, with each bucket's
   min and max; a bucket is a 1/1024 of an octave (`log2`), then, in a bucket that is still too large to
   collect, a 1/4096 of its range. A plain aggregation: partial per task, merged by bucket (it scales out);
2. the values of the few buckets that hold a wanted rank, collected and sorted here; a bucket whose min equals its
   max is not collected (its value is known).

The ranks and the interpolation are DuckDB's: position (n − 1)·p, the values at its floor and ceiling
interpolated as DuckDB 2.0 does (`interpolate`), so the figures are DuckDB's to the bit (tests/test_spark.py). A bucket function that is
monotone makes a bucket's values exactly those in [its min, its max]; that is checked all the same (the buckets'
ranges are disjoint and in order; the values collected are as many as counted), and a mismatch runs the
statement with `percentile` instead.

`count(x)` of a value `x` that a quantile also ranks is read from the histogram (no further scan); any other
aggregate of the statement is one more statement, with the quantiles left out.
"""

from __future__ import annotations

import itertools
import math
import re
from fractions import Fraction

from budgetscope.spark.dialect import literal

COLLECT_MAX = 200_000
"""At most this many values are collected to the driver in one pass; windows holding more are split further."""
MAX_PASSES = 6
LOG_BUCKETS = 1024  # buckets an octave in the first pass
SPLIT_BUCKETS = 4096  # buckets a window is split into in a later pass
_NAN, _INF = 1 << 23, 1 << 22
_PLACEHOLDER = re.compile(r"__bs_p(\d+)__")  # a bound parameter (dialect.bind)
_SIGN = 1 << 21  # keeps log buckets of positive values above 0 and of negative values below


class Quantile:
    """One `quantile_cont` projection: its value expression, fractions, and whether it returns a list."""

    def __init__(self, position: int, value, fractions: list[float], is_list: bool):
        self.position, self.value, self.fractions, self.is_list = position, value, fractions, is_list


class Plan:
    """How to run a statement: `quantiles` by selection, `counts` (position → quantile index) from the
    histogram, `rest` (a select of the other projections, or None) run as it is."""

    def __init__(self, tree, quantiles: list[Quantile], counts: dict[int, int], rest, width: int):
        self.tree, self.quantiles, self.counts, self.rest, self.width = tree, quantiles, counts, rest, width


def plan(tree, bound: list[str] | None = None) -> Plan | None:
    """The plan of a parsed DuckDB statement, or None when it has no top-level quantile_cont to select, or is
    not a plain global aggregate (GROUP BY, HAVING, DISTINCT, windows, set operations), or has a WITH: a
    statement over CTEs (queue_wait's engine steps, a join) would compute them in each of its passes, where
    `percentile` reads them once (and such sources are small next to `requests`)."""
    # imported on use: sqlglot 198 ms to import
    from sqlglot import exp

    if not isinstance(tree, exp.Select) or any(
        tree.args.get(k)
        for k in ("group", "having", "distinct", "qualify", "order", "limit", "offset", "with", "with_")
    ):
        return None
    quantiles, others = [], []
    for i, e in enumerate(tree.expressions):
        q = _quantile(i, e.unalias() if isinstance(e, exp.Alias) else e)
        if q is None:
            others.append((i, e))
        else:
            quantiles.append(q)
    if not quantiles or any(e.find(exp.PercentileCont, exp.Window) for _, e in others):
        return None

    def same(sql: str) -> str:  # two `?` bound to one value are two placeholders: compare the values
        return _PLACEHOLDER.sub(lambda m: bound[int(m.group(1))], sql) if bound else sql

    keys = {same(q.value.sql()): j for j, q in enumerate(quantiles)}
    counts, rest = {}, []
    for i, e in others:
        key = _counted(e.unalias() if isinstance(e, exp.Alias) else e)
        key = same(key) if key is not None else None
        if key in keys:
            counts[i] = keys[key]
        else:
            rest.append((i, e))
    rest_tree = None
    if rest:
        rest_tree = tree.copy()
        rest_tree.set("expressions", [e.copy() for _, e in rest])
    return Plan(tree, quantiles, counts, (rest_tree, [i for i, _ in rest]) if rest else None, len(tree.expressions))


def _counted(e) -> str | None:
    """The value key (as `Quantile.value`) of a projection `count(x) [FILTER (WHERE c)]`, or None: such a count is
    the histogram's total of that value, with no scan of its own."""
    # imported on use: sqlglot 198 ms to import
    from sqlglot import exp

    cond = None
    if isinstance(e, exp.Filter) and isinstance(e.this, exp.Count):
        cond, e = e.expression.this, e.this
    if not isinstance(e, exp.Count) or isinstance(e.this, (exp.Distinct, exp.Star)) or e.this is None:
        return None
    return _value(e.this, cond).sql()


def _value(x, cond):
    """`x` as DOUBLE, or with a FILTER condition `CASE WHEN cond THEN x END`: a quantile's (or count's) value."""
    # imported on use: sqlglot 198 ms to import
    from sqlglot import exp

    value = exp.cast(x.copy(), "DOUBLE")
    return value if cond is None else exp.Case(ifs=[exp.If(this=cond.copy(), true=value)])


def _quantile(position: int, e) -> Quantile | None:
    """A projection `quantile_cont(x, p | [p, ...]) [FILTER (WHERE c)]` (x as DOUBLE; with a filter, `CASE WHEN c
    THEN x END`), or None."""
    # imported on use: sqlglot 198 ms to import
    from sqlglot import exp

    cond = None
    if isinstance(e, exp.Filter) and isinstance(e.this, exp.PercentileCont):
        cond, e = e.expression.this, e.this
    if not isinstance(e, exp.PercentileCont):
        return None
    fr = e.expression
    items = fr.expressions if isinstance(fr, exp.Array) else [fr]
    try:
        fractions = [float(x.to_py()) for x in items]
    except (ValueError, TypeError, AttributeError):
        return None
    if not all(0.0 <= f <= 1.0 for f in fractions):
        return None
    return Quantile(position, _value(e.this, cond), fractions, isinstance(fr, exp.Array))


def log_bucket(v: str) -> str:
    """Spark SQL: a bucket of the double `v`, monotone in v: NaN and ±Infinity their own, 0 (and −0) its own,
    then 1/LOG_BUCKETS of an octave (log2), positive values above 0 and negative ones below."""
    return (
        f"CASE WHEN isnan({v}) THEN {_NAN} WHEN {v} = CAST('Infinity' AS DOUBLE) THEN {_INF} "
        f"WHEN {v} = CAST('-Infinity' AS DOUBLE) THEN -{_INF} "
        f"WHEN {v} > 0 THEN {_SIGN} + CAST(floor(log2({v}) * {LOG_BUCKETS}) AS BIGINT) "
        f"WHEN {v} < 0 THEN -{_SIGN} - CAST(floor(log2(-{v}) * {LOG_BUCKETS}) AS BIGINT) ELSE 0 END"
    )


def quantile_of(n: int, fraction: float, at) -> float:
    """DuckDB's quantile_cont of n values at `fraction`, `at(r)` giving the r-th smallest (0-based): position
    (n − 1)·fraction, the values at its floor and ceiling interpolated by the fraction d of the position."""
    pos = (n - 1) * fraction
    lo_r, hi_r = math.floor(pos), math.ceil(pos)
    lo = at(lo_r)
    if lo_r == hi_r:
        return lo
    return interpolate(lo, pos - lo_r, at(hi_r))


def interpolate(lo: float, d: float, hi: float) -> float:
    """`lo·(1 − d) + hi·d` as DuckDB 2.0 computes it on x86-64: `hi·d` rounded, then one fused multiply-add
    (checked bit for bit against DuckDB on 400 random fractions). Not finite: plainly."""
    if not all(map(math.isfinite, (lo, d, hi))):
        return lo * (1.0 - d) + hi * d
    return float(Fraction(lo) * Fraction(1.0 - d) + Fraction(hi * d))


def ranks(n: int, fraction: float) -> tuple[int, ...]:
    """The 0-based ranks quantile_cont reads of n values at `fraction`: the floor and ceiling of (n − 1)·p."""
    pos = (n - 1) * fraction
    return tuple(sorted({math.floor(pos), math.ceil(pos)}))


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


class Mismatch(RuntimeError):
    """The values collected from a window are not as many as the histogram counted (a bucket function that is not
    monotone): the statement is run with `percentile` instead."""


def _source(p: Plan):
    """(SELECT explode(array(named_struct('k', j, 'v', value_j), ...)) AS bs_e FROM ... WHERE ..., its WITH)."""
    # imported on use: sqlglot 198 ms to import
    from sqlglot import exp

    src = p.tree.copy()
    with_ = None
    for key in ("with", "with_"):  # SQLGlot's name for it changed between versions
        if src.args.get(key) is not None:
            with_ = (key, src.args[key])
            src.set(key, None)
    structs = [
        exp.Anonymous(
            this="named_struct",
            expressions=[exp.Literal.string("k"), exp.Literal.number(j), exp.Literal.string("v"), q.value.copy()],
        )
        for j, q in enumerate(p.quantiles)
    ]
    src.set(
        "expressions",
        [
            exp.alias_(
                exp.Anonymous(this="explode", expressions=[exp.Anonymous(this="array", expressions=structs)]),
                "bs_e",
            )
        ],
    )
    return src, with_


def _around(template: str, p: Plan):
    """`template` (DuckDB SQL over a table `bs_src`) with bs_src the values' source, and the statement's WITH."""
    # imported on use: sqlglot 198 ms to import
    import sqlglot
    from sqlglot import exp

    src, with_ = _source(p)
    tree = sqlglot.parse_one(template, read="duckdb")
    for t in list(tree.find_all(exp.Table)):
        if t.name == "bs_src":
            t.replace(exp.Subquery(this=src, alias=exp.TableAlias(this=exp.to_identifier("bs_s"))))
    if with_ is not None:
        tree.set(with_[0], with_[1].copy())
    return tree


def _in_windows(windows: list[tuple[int, float, float]], select: str) -> str:
    """DuckDB SQL: `select` over the values (`k`, `v`) of bs_src that lie in a window, each joined with its window
    (`w` its index, `lo`, `hi`). A join with the windows as a table of literals, not a CASE of one branch a window:
    with a few dozen windows (several tiers' quantiles at once) the CASE outgrew Spark's code generation and ran
    interpreted, ~20× slower."""
    rows = ", ".join(f"({w}, {k}, {literal(lo)}, {literal(hi)})" for w, (k, lo, hi) in enumerate(windows))
    return (
        f"SELECT {select} FROM (SELECT bs_e.k AS k, bs_e.v AS v FROM bs_src WHERE bs_e.v IS NOT NULL) AS bs_x "
        f"JOIN (VALUES {rows}) AS bs_w(w, wk, lo, hi) ON bs_x.k = bs_w.wk AND bs_x.v >= bs_w.lo AND bs_x.v <= bs_w.hi"
    )


class _Cells:
    """One histogram of one quantile's values (or of a window of them): (lo, hi, n) cells in order, and how many
    values lie below the first."""

    def __init__(self, cells: list[tuple[float, float, int]], before: int = 0):
        self.cells, self.before = cells, before

    def find(self, r: int) -> tuple[float, float, int, int]:
        """(lo, hi, n, values below lo) of the cell holding the r-th smallest value."""
        below = self.before
        for lo, hi, n in self.cells:
            if r < below + n:
                return lo, hi, n, below
            below += n
        raise Mismatch(f"rank {r} beyond the histogram's {below} values")


def _cells(rows) -> dict[int, _Cells]:
    """key → its cells, from (key, bucket, n, min, max) rows. Raises Mismatch unless the cells, in bucket order,
    hold disjoint ranges in value order (NaN last, as both engines sort it): then the counts before a cell are
    exact ranks, whatever the bucket function."""
    by: dict[int, list] = {}
    for key, b, n, lo, hi in rows:
        by.setdefault(key, []).append((b, lo, hi, n))
    out = {}
    for k, v in by.items():
        cells = [(lo, hi, n) for _, lo, hi, n in sorted(v, key=lambda x: x[0])]
        for (_, a_hi, _), (b_lo, _, _) in itertools.pairwise(cells):
            if not (a_hi < b_lo or (math.isnan(b_lo) and not math.isnan(a_hi))):
                raise Mismatch(f"buckets out of value order: {a_hi!r} then {b_lo!r}")
        out[k] = _Cells(cells)
    return out


def run(p: Plan, execute) -> list:
    """The statement's one row. `execute(tree)` runs a DuckDB-dialect tree on Spark and returns its rows."""
    hist = _cells(
        execute(
            _around(
                f"SELECT bs_e.k, {log_bucket('bs_e.v')} AS b, count(*), min(bs_e.v), max(bs_e.v) "
                "FROM bs_src WHERE bs_e.v IS NOT NULL GROUP BY 1, 2",
                p,
            )
        )
    )
    totals = {k: sum(n for _, _, n in c.cells) for k, c in hist.items()}
    known: dict[tuple[int, int], float] = {}
    pending: dict[tuple[int, int], tuple[_Cells, int]] = {}  # (k, rank) → (the cells it is in, k)
    for k, q in enumerate(p.quantiles):
        n = totals.get(k, 0)
        for f in q.fractions if n else ():
            for r in ranks(n, f):
                pending[(k, r)] = hist[k]
    for _ in range(MAX_PASSES + 1):
        windows: dict[tuple[int, float, float], tuple[int, int]] = {}  # (k, lo, hi) → (values below, n)
        at: dict[tuple[int, int], tuple[int, float, float]] = {}
        for (k, r), cells in pending.items():
            lo, hi, n, below = cells.find(r)
            if _same(lo, hi):
                known[(k, r)] = lo
            else:
                windows[(k, lo, hi)] = (below, n)
                at[(k, r)] = (k, lo, hi)
        if not windows:
            break
        order = list(windows)
        if sum(n for _, n in windows.values()) <= COLLECT_MAX or _ == MAX_PASSES:
            got: dict[int, list[float]] = {}
            for w, v in execute(_around(_in_windows(order, "w, v"), p)):
                got.setdefault(w, []).append(v)
            for w, key in enumerate(order):
                got.setdefault(w, []).sort()
                if len(got[w]) != windows[key][1]:
                    raise Mismatch(f"window {key}: {len(got[w])} values collected, {windows[key][1]} counted")
            for (k, r), key in at.items():
                w = order.index(key)
                known[(k, r)] = got[w][r - windows[key][0]]
            break
        # (v − lo) / (hi − lo) is in [0, 1] and monotone in v, even where hi − lo is subnormal (its inverse is not
        # finite)
        bucket = f"CAST(floor((v - lo) / (hi - lo) * {SPLIT_BUCKETS}) AS BIGINT)"
        split = _cells(
            execute(
                _around(
                    f"SELECT w, b, count(*), min(v), max(v) FROM ({_in_windows(order, f'w, v, {bucket} AS b')}) GROUP BY 1, 2",
                    p,
                )
            )
        )
        pending = {}
        for (k, r), key in at.items():
            w = order.index(key)
            cells = split.get(w, _Cells([]))
            pending[(k, r)] = _Cells(cells.cells, windows[key][0])
    row: list = [None] * p.width
    for k, q in enumerate(p.quantiles):
        n = totals.get(k, 0)
        vals = [quantile_of(n, f, lambda r, k=k: known[(k, r)]) for f in q.fractions] if n else None
        row[q.position] = vals if q.is_list else (vals[0] if vals else None)
    for pos, k in p.counts.items():
        row[pos] = totals.get(k, 0)
    return row
