"""budgetscope's SQL, written once in DuckDB's dialect, run on Spark: SQLGlot transpiles it, and this module
fixes what SQLGlot leaves to the engine.

    to_spark("SELECT quantile_cont(x, [0.5, 0.99]) FROM requests WHERE tier = ?", ["interactive"])

What is rewritten, and why (each checked against DuckDB by tests/test_spark.py and
tests/test_spark_derive.py):

- `?` parameters are bound as literals (Spark SQL has no positional parameters in every version); a float as
  `CAST('<repr>' AS DOUBLE)`, so it is the same double on both engines (Spark reads `1.5` as a DECIMAL).
- `quantile_cont(x, p)` / `quantile_cont(x, [p, ...])` → `percentile(x, p)` / `percentile(x, array(...))`
  with DOUBLE fractions: both interpolate linearly between the two closest ranks, (n − 1)·p. A global aggregate
  with quantiles is run by selection instead (`quantiles.py`, from `SparkConnection.execute`): `percentile` is
  exact but slow; it stays for what selection does not take (GROUP BY, CTEs).
- `json->>'key'` / `json->'key'`: a DuckDB key without `$` is one key, dots included
  (`'gen_ai.request.model'`), not a path; SQLGlot reads it as a path, so it is quoted first.
- `json_exists(json, path)` → `get_json_object(json, path) IS NOT NULL` (a key whose value is null differs); a
  quoted key `$."a.b"` becomes `$['a.b']`, the form Spark reads.
- `json_transform(json, '{"k": "BIGINT", ...}')` → `from_json(json, 'STRUCT<`k`: BIGINT, ...>')` (lists of
  structures → `ARRAY<...>`, nested objects → nested `STRUCT<...>`).
- `list(x ORDER BY y)` → the values of `array_sort(collect_list(struct(y, x)))` (Spark's collect_list has no
  order).
- `A UNION ALL BY NAME B` → B's columns put in A's order, then a plain UNION ALL.
- `list[i]` with an index that is not a literal → `try_element_at(list, i)`: DuckDB counts from 1, Spark's
  brackets from 0, and SQLGlot moves only a literal index; both give NULL past the end.
- `isfinite(x)` → `NOT (isnan(x) OR abs(x) = Infinity)` (Spark has none; NULL stays NULL).
- `len(list)` / `length(list)` → `size(list)`: DuckDB's `len` takes strings and lists, Spark's `length` strings
  only; which one an argument is comes from the archive's schema (SQLGlot's type annotation).
- `epoch_ns(ts)` → `unix_micros(ts) * 1000`, `epoch_us(ts)` → `unix_micros(ts)`, `epoch(ts)` →
  `unix_micros(ts) / 1e6` (DuckDB's `epoch` keeps the fraction, Spark's `unix_timestamp` drops it). Spark's
  timestamps hold microseconds: a nanosecond part is lost. `to_timestamp(seconds)` → `timestamp_micros` of the
  seconds rounded half to even to the microsecond, as DuckDB (SQLGlot's `from_unixtime` would drop the fraction).

Why SQLGlot and not Ibis: with SQLGlot the report's SQL in `budgetscope.analysis` stays the one copy and runs on
DuckDB untouched; Ibis would have meant rewriting every query as Ibis expressions (a second formulation, and
DuckDB's path would change too). What transpiling costs: docs/benchmarks.md, "Transpiling".
"""

from __future__ import annotations

import json
import re

from budgetscope import schema

DUCKDB_TO_SPARK_TYPES = {
    "VARCHAR": "STRING",
    "JSON": "STRING",
    "BIGINT": "BIGINT",
    "INTEGER": "INT",
    "DOUBLE": "DOUBLE",
    "BOOLEAN": "BOOLEAN",
    "SMALLINT": "SMALLINT",
    "FLOAT": "FLOAT",
}

EPOCH_SCALE = {"epoch_ns": 1000, "epoch_us": 1}
"""DuckDB's epoch_ns / epoch_us of a timestamp: Spark's unix_micros times this."""


class DialectError(ValueError):
    """SQL that cannot be carried over to Spark; one line."""


def spark_type(duckdb_type: str) -> str:
    """A DuckDB column type (as budgetscope's schema writes them) in Spark DDL."""
    t = duckdb_type.strip().upper()
    if t.endswith("[]"):
        return f"ARRAY<{spark_type(t[:-2])}>"
    if t not in DUCKDB_TO_SPARK_TYPES:
        raise DialectError(f"no Spark type for {duckdb_type}")
    return DUCKDB_TO_SPARK_TYPES[t]


def literal(v) -> str:
    """A Python value as a SQL literal that both engines read as the same value."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v) if -(2**63) <= v < 2**63 else f"CAST('{v}' AS DOUBLE)"
    if isinstance(v, float):
        return (
            f"CAST('{v!r}' AS DOUBLE)"
            if v == v and abs(v) != float("inf")
            else f"CAST('{'NaN' if v != v else ('Infinity' if v > 0 else '-Infinity')}' AS DOUBLE)"
        )
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    raise DialectError(f"cannot bind a parameter of type {type(v).__name__}")


_TOKENS = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|/\*.*?\*/|->>|->|\?""", re.S)


def bind(sql: str, params=None) -> tuple[str, list[str]]:
    """(`sql` with its `?` parameters replaced by placeholders `__bs_pN__`, the literals in Spark's syntax), and
    DuckDB's plain JSON keys quoted as one-key paths. Strings, quoted names and comments are left alone."""
    params = list(params or [])
    out, bound, i, last, after_arrow = [], [], 0, 0, False
    for m in _TOKENS.finditer(sql):
        tok = m.group(0)
        out.append(sql[last : m.start()])
        last = m.end()
        if tok == "?":
            if i >= len(params):
                raise DialectError("the query has more ? parameters than values")
            out.append(f"__bs_p{i}__")
            bound.append(literal(params[i]))
            i += 1
        elif tok.startswith("'") and after_arrow:
            key = tok[1:-1].replace("''", "'")
            out.append(tok if key.startswith(("$", "/")) else "'$." + json.dumps(key).replace("'", "''") + "'")
        else:
            out.append(tok)
        after_arrow = tok in ("->", "->>")
        if tok.startswith("'") or tok == "?":
            after_arrow = False
    out.append(sql[last:])
    if i != len(params):
        raise DialectError(f"the query has {i} ? parameters, {len(params)} values were given")
    return "".join(out), bound


def archive_columns() -> dict[str, list[str]]:

    return {t.name: [c.name for c in t.columns] for t in schema.PUBLIC}


def schema_types(tables: dict[str, list[str]]) -> dict[str, dict[str, str]]:
    """`tables` with each column's DuckDB type where the archive's schema has it (VARCHAR otherwise)."""
    known = {t.name: {c.name: c.type for c in t.columns} for t in schema.PUBLIC}
    return {t: {c: known.get(t, {}).get(c, "VARCHAR") for c in cols} for t, cols in tables.items()}


def _json_struct(structure: str) -> str:
    try:
        fields = json.loads(structure)
    except ValueError as e:
        raise DialectError(f"json_transform structure is not JSON: {e}") from None
    return _struct_type(fields)


def _struct_type(t) -> str:
    """A json_transform structure (a type name, `[element]`, or `{key: structure}`) as a Spark type."""
    if isinstance(t, dict):
        return "STRUCT<" + ", ".join(f"`{k}`: {_struct_type(v)}" for k, v in t.items()) + ">"
    if isinstance(t, list) and len(t) == 1:
        return f"ARRAY<{_struct_type(t[0])}>"
    if isinstance(t, str):
        return spark_type(t)
    raise DialectError(f"json_transform structure part {json.dumps(t)} is not carried over")


_QUOTED_KEY = re.compile(r'^\$\."([^"\'\\]*)"$')


def _spark_path(path):
    """A JSONPath literal `$."key.with.dots"` (DuckDB's quoted key) as Spark's `$['key.with.dots']`: Spark's
    `get_json_object` has no quoted keys and would look for a path that never matches."""
    # imported on use: sqlglot 198 ms to import
    from sqlglot import exp

    m = _QUOTED_KEY.match(path.this) if isinstance(path, exp.Literal) and path.is_string else None
    return exp.Literal.string(f"$['{m.group(1)}']") if m else path


def _rewrite(tree, tables: dict[str, list[str]]):
    # imported on use: sqlglot 198 ms to import
    from sqlglot import exp

    def fix(node):
        if isinstance(node, exp.Bracket) and len(node.expressions) == 1:
            (i,) = node.expressions
            if not (i.is_number or i.is_string or isinstance(i, exp.Slice)):
                # SQLGlot moves a literal index from DuckDB's base 1 to Spark's base 0, not an expression
                return exp.Anonymous(this="try_element_at", expressions=[node.this, i])
        if isinstance(node, exp.PercentileCont):
            fr = node.expression
            items = fr.expressions if isinstance(fr, exp.Array) else [fr]
            dbl = [exp.cast(x, "DOUBLE") for x in items]
            arg = exp.Array(expressions=dbl) if isinstance(fr, exp.Array) else dbl[0]
            return exp.Anonymous(this="percentile", expressions=[node.this, arg])
        if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select):
            inlined = _inline_struct_unnest(node.this)
            if inlined is not None:
                return exp.Paren(this=inlined)
        if isinstance(node, exp.Anonymous) and node.name.lower() == "json_exists":
            # Spark has none: a key whose value is JSON null counts as absent
            src, path = node.expressions
            return exp.Not(
                this=exp.Is(
                    this=exp.Anonymous(this="get_json_object", expressions=[src, _spark_path(path)]),
                    expression=exp.Null(),
                )
            )
        if isinstance(node, exp.Anonymous) and node.name.lower() == "json_transform":
            src, structure = node.expressions
            if not isinstance(structure, exp.Literal) or not structure.is_string:
                raise DialectError("json_transform needs a literal structure")
            return exp.Anonymous(this="from_json", expressions=[src, exp.Literal.string(_json_struct(structure.this))])
        if isinstance(node, exp.ArrayAgg) and isinstance(node.this, exp.Order):
            order = node.this
            (key,) = order.expressions
            if key.args.get("desc"):
                raise DialectError("list(... ORDER BY ... DESC) is not carried over")
            val = order.this
            pairs = exp.Anonymous(
                this="collect_list",
                expressions=[
                    exp.Anonymous(this="struct", expressions=[exp.alias_(key.this, "k"), exp.alias_(val, "v")])
                ],
            )
            return exp.Anonymous(
                this="__bs_values", expressions=[exp.Anonymous(this="array_sort", expressions=[pairs])]
            )
        if isinstance(node, exp.Anonymous) and node.name.lower() == "isfinite":
            x = node.expressions[0].transform(fix)  # transform() does not descend into what `fix` returns
            inf = exp.cast(exp.Literal.string("Infinity"), "DOUBLE")
            return exp.Not(
                this=exp.Paren(
                    this=exp.Or(
                        this=exp.Anonymous(this="isnan", expressions=[x.copy()]),
                        expression=exp.EQ(this=exp.Abs(this=x.copy()), expression=inf),
                    )
                )
            )
        if isinstance(node, exp.Anonymous) and node.name.lower() in EPOCH_SCALE:
            ts = node.expressions[0].transform(fix)
            us, scale = exp.Anonymous(this="unix_micros", expressions=[ts]), EPOCH_SCALE[node.name.lower()]
            return us if scale == 1 else exp.Mul(this=us, expression=exp.Literal.number(scale))
        if isinstance(node, exp.UnixToTime) and node.args.get("scale") is None and not node.args.get("format"):
            # DuckDB's to_timestamp(seconds) keeps the fraction, rounded half to even to the microsecond (a
            # tie is common: doubles near 1.7e15 µs step by 0.25); SQLGlot's from_unixtime formats whole
            # seconds, Spark's timestamp_seconds truncates
            us = exp.Anonymous(
                this="bround",
                expressions=[
                    exp.Mul(this=exp.Paren(this=node.this.transform(fix)), expression=exp.Literal.number("1e6"))
                ],
            )
            return exp.Anonymous(this="timestamp_micros", expressions=[exp.cast(us, "BIGINT")])
        if isinstance(node, exp.TimeToUnix):  # DuckDB's epoch(ts): seconds with their fraction
            return exp.Div(
                this=exp.Anonymous(this="unix_micros", expressions=[node.this.transform(fix)]),
                expression=exp.Literal.number("1e6"),
            )
        if isinstance(node, exp.Union) and node.args.get("by_name"):
            names = _names(node, tables)
            left, right = node.this, node.expression
            have = set(_names(right, tables))

            def pick(side, have_all):
                cols = [
                    exp.column(n, quoted=True) if n in have_all else exp.alias_(exp.Null(), n, quoted=True)
                    for n in names
                ]
                return exp.select(*cols).from_(side.subquery(f"bs_u{next(counter)}"))

            node.set("by_name", None)
            node.set("this", pick(left, set(_names(left, tables))))
            node.set("expression", pick(right, have))
            return node
        return node

    counter = iter(range(1 << 30))
    _sizes_of_lists(tree, tables)
    return _unique_ctes(tree.transform(fix))


def _sizes_of_lists(tree, tables: dict[str, list[str]]) -> None:
    """`len(x)` / `length(x)` of a list → `size(x)`, in place. Which arguments are lists is read from the types
    SQLGlot infers over the archive's schema; an argument whose type it cannot tell stays a string length."""
    # imported on use: sqlglot 198 ms to import
    from sqlglot import exp
    from sqlglot.errors import SqlglotError
    from sqlglot.optimizer.annotate_types import annotate_types
    from sqlglot.optimizer.qualify import qualify

    lengths = list(tree.find_all(exp.Length))
    if not lengths:
        return
    for i, node in enumerate(lengths):
        node.meta["bs_len"] = i
    types = schema_types(tables)
    try:
        typed = annotate_types(
            qualify(tree.copy(), schema=types, dialect="duckdb", validate_qualify_columns=False, identify=False),
            schema=types,
            dialect="duckdb",
        )
    except (SqlglotError, KeyError, ValueError):
        return
    lists = {
        n.meta["bs_len"]
        for n in typed.find_all(exp.Length)
        if "bs_len" in n.meta and n.this.type is not None and n.this.type.is_type(exp.DataType.Type.ARRAY)
    }
    for node in lengths:
        if node.meta["bs_len"] in lists:
            node.replace(exp.ArraySize(this=node.this.copy()))


def _unique_ctes(tree):
    """Spark allows no WITH inside a subquery, so SQLGlot lifts every CTE to the top, where two adapters'
    `r` or `t` would clash: each CTE gets a name of its own first (innermost scopes first), and the tables of
    its scope that named it follow."""
    # imported on use: sqlglot 198 ms to import
    from sqlglot import exp

    withs = [w for w in tree.find_all(exp.With)]
    for k, w in enumerate(reversed(withs)):
        scope = w.parent
        for cte in w.expressions:
            old = cte.alias_or_name
            new = f"{old}__bs{k}"
            for t in scope.find_all(exp.Table):
                if t.name == old and not t.args.get("db"):
                    t.set("this", exp.to_identifier(new))
                    if not t.alias:
                        t.set("alias", exp.TableAlias(this=exp.to_identifier(old)))
            alias = cte.args["alias"].copy()  # its column list kept: `t(a, b) AS (...)` names the columns
            alias.set("this", exp.to_identifier(new))
            cte.set("alias", alias)
    return tree


def _inline_struct_unnest(sel):
    """`(SELECT f(x.a, x.b) FROM (SELECT unnest(regexp_extract(s, re, ['a', 'b']))) x)`, DuckDB's way to name a
    regex's groups, → `f(regexp_extract(s, re, 1), regexp_extract(s, re, 2))`: Spark's regexp_extract takes one
    group, and a FROM subquery may not refer to the outer row. None when `sel` is not of that form."""
    # imported on use: sqlglot 198 ms to import
    from sqlglot import exp

    src = sel.args.get("from") or sel.args.get("from_")
    if src is None or sel.args.get("joins") or sel.args.get("where") or len(sel.expressions) != 1:
        return None
    sub = src.this
    if not isinstance(sub, exp.Subquery) or not isinstance(sub.this, exp.Select) or len(sub.this.expressions) != 1:
        return None
    un = sub.this.expressions[0]
    if not isinstance(un, (exp.Explode, exp.Unnest)):
        return None
    rx = un.this if isinstance(un, exp.Explode) else (un.expressions[0] if len(un.expressions) == 1 else None)
    if not isinstance(rx, exp.RegexpExtract) or not isinstance(rx.args.get("group"), exp.Array):
        return None
    names = [g.this for g in rx.args["group"].expressions]
    alias = sub.alias_or_name
    out = sel.expressions[0].copy()
    for col in list(out.find_all(exp.Column)):
        if col.table == alias and col.name in names:
            col.replace(
                exp.RegexpExtract(
                    this=rx.this.copy(),
                    expression=rx.expression.copy(),
                    group=exp.Literal.number(names.index(col.name) + 1),
                )
            )
    return out


def _with(node):
    return node.args.get("with") or node.args.get("with_")


def _names(node, tables: dict[str, list[str]]) -> list[str]:
    """The output column names of a query node, stars expanded (through CTEs in scope, subqueries, and the base
    tables in `tables`): what UNION BY NAME needs that SQLGlot does not resolve on its own."""
    # imported on use: sqlglot 198 ms to import
    from sqlglot import exp

    if isinstance(node, (exp.Subquery, exp.Paren)):
        return _names(node.this, tables)
    if isinstance(node, exp.Union):
        left = _names(node.this, tables)
        if not node.args.get("by_name"):
            return left
        return left + [n for n in _names(node.expression, tables) if n not in left]
    if isinstance(node, exp.Table):
        name = node.name
        up = node
        while up is not None:
            w = _with(up) if isinstance(up, exp.Query) else None
            if w is not None:
                for cte in w.expressions:
                    if cte.alias_or_name == name and cte.this.find(exp.Table) is not node:
                        return _names(cte.this, tables)
            up = up.parent
        if name in tables:
            return list(tables[name])
        raise DialectError(f"cannot tell the columns of {name} for UNION BY NAME")
    if isinstance(node, exp.Select):
        out = []
        for e in node.expressions:
            if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
                if node.args.get("joins"):
                    raise DialectError("UNION BY NAME over SELECT * of a join is not carried over")
                src = node.args.get("from") or node.args.get("from_")
                out += _names(src.this, tables)
            else:
                out.append(e.alias_or_name)
        return out
    raise DialectError(f"cannot tell the columns of {type(node).__name__} for UNION BY NAME")


def _fix_filters(tree):
    """`__bs_values(array_sort(collect_list(...))) FILTER (WHERE c)`: the FILTER belongs to collect_list; then
    each `__bs_values(pairs)` becomes `transform(pairs, e -> e.v)`."""
    # imported on use: sqlglot 198 ms to import
    from sqlglot import exp

    for f in list(tree.find_all(exp.Filter)):
        inner = f.this
        if isinstance(inner, exp.Anonymous) and inner.name == "__bs_values":
            sort = inner.expressions[0]
            coll = sort.expressions[0]
            sort.set("expressions", [exp.Filter(this=coll.copy(), expression=f.expression.copy())])
            f.replace(inner)
    for v in list(tree.find_all(exp.Anonymous)):
        if v.name == "__bs_values":
            lam = exp.Lambda(
                this=exp.Dot(this=exp.to_identifier("bs_e"), expression=exp.to_identifier("v")),
                expressions=[exp.to_identifier("bs_e")],
            )
            pairs = v.expressions[0]
            v.replace(_null_if_empty(pairs, exp.Anonymous(this="transform", expressions=[pairs.copy(), lam])))
    for agg in list(tree.find_all(exp.ArrayAgg)):  # an unordered list(x): collect_list, NULL when empty
        target = agg.parent if isinstance(agg.parent, exp.Filter) else agg
        target.replace(_null_if_empty(target.copy(), target.copy()))
    return tree


def _null_if_empty(arr, value):
    """DuckDB's list() of no rows is NULL, Spark's collect_list() is []: `IF(size(arr) = 0, NULL, value)`."""
    # imported on use: sqlglot 198 ms to import
    from sqlglot import exp

    return exp.If(
        this=exp.EQ(this=exp.Anonymous(this="size", expressions=[arr]), expression=exp.Literal.number(0)),
        true=exp.Null(),
        false=value,
    )


def to_spark(sql: str, params=None, tables: dict[str, list[str]] | None = None) -> str:
    """One statement of budgetscope's DuckDB SQL (with `?` parameters bound from `params`) as Spark SQL.
    `tables`: base table → its columns, for `SELECT *` under UNION BY NAME (default: the archive's tables)."""
    tree, bound = parse(sql, params)
    return emit(tree, bound, tables)


def parse(sql: str, params=None):
    """(the statement's DuckDB tree, its parameters as Spark literals): the tree holds `__bs_pN__` for each."""
    # imported on use: sqlglot 198 ms to import
    import sqlglot
    from sqlglot.errors import ParseError

    text, bound = bind(sql, params)
    try:
        trees = [t for t in sqlglot.parse(text, read="duckdb") if t is not None]
    except ParseError as e:
        raise DialectError(f"SQL not understood: {str(e).splitlines()[0]}") from None
    if len(trees) != 1:
        raise DialectError("one statement at a time")
    return trees[0], bound


def emit(tree, bound: list[str], tables: dict[str, list[str]] | None = None) -> str:
    """A DuckDB tree of `parse` as Spark SQL, its parameters bound (the tree is left as it was)."""
    tree = _fix_filters(_rewrite(tree.copy(), tables if tables is not None else archive_columns()))
    out = tree.sql(dialect="spark")
    for j in range(len(bound) - 1, -1, -1):
        out = out.replace(f"__bs_p{j}__", bound[j])
    return out
