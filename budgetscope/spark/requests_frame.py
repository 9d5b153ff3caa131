"""`requests` derived on Spark from a view of spans, in two steps: the span adapters' server rows first, held in
executor memory (`localCheckpoint`), then the client join and the row checks over them.

One statement, as DuckDB runs it, does not finish on Spark once llm-d's spans are present: its server rows read
the ancestry joins of `derive/llmd.py` four times and vLLM's rows twice, and the derivation refers to the server
rows three times, so Spark's analyzer (DeduplicateRelations, Spark 4.x) walks a plan of hundreds of self-joins and
ran out of a 4 GB driver on 12 requests (docs/scale.md). Cut there, the analyzer sees the first step's result as a
table. The rows are the same as DuckDB's (tests/test_spark_derive.py).

The first step runs as one statement an adapter (vLLM's with llm-d's, whose legs it reads), each held on its own:
over every OTLP conformance case (29 cases, 6 sources, 51 requests; warm `local[2]`, 2-core Intel Xeon) the
first step took 55.6 s as one union of the adapters and 25.5 s so (82.1 s and 41.3 s on a fresh JVM).

A recursive CTE (the span trees of Triton, TGI and SGLang) is run once, before its statement, and held the same
way: Spark inlines a CTE at each reference, and a recursive one runs its iterations, a job or more each, at every
one. The first step over Triton's 6 conformance requests, whose span tree three of its CTEs read: 231 Spark jobs
and 12.5 s on a warm JVM; held, 60 jobs and 6.2 s.
"""

from __future__ import annotations

from functools import reduce

from budgetscope.derive.requests import SPAN_ADAPTERS, requests_sql, served_sql
from budgetscope.spark.dialect import _with, archive_columns, to_spark

SERVED_VIEW = "bs_served"
"""The temporary view that holds the first step's rows while the second runs."""

TOGETHER = {"vllm", "llmd"}
"""Sources whose server rows are derived in one statement: llm-d's request reads its vLLM legs (derive/llmd.py)."""

HELD_PREFIX = "bs_held_"
"""The temporary views of held recursive CTEs are named this, then the CTE's name."""


def requests_frame(spark, spans: str, present: set[str], tables: dict[str, list[str]] | None = None):
    """(the DataFrame of `requests` rows derived from the view `spans` (adapters of the sources `present`), the
    DataFrames held in executor memory for it: unpersist them, and `drop_held_views`, when its rows have been
    read)."""
    tables = {**archive_columns(), **(tables or {})}
    held: list = []
    parts = []
    for group in adapter_groups(present):
        part = spark.sql(hold_recursion(spark, to_spark(served_sql(spans, group), tables=tables), held))
        parts.append(part.localCheckpoint())
    held.extend(parts)
    # the union is not held again: each part is, and Spark 4.3's localCheckpoint of a union of held frames fails
    # (NoSuchElementException on an attribute of the union's output)
    served = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
    served.createOrReplaceTempView(SERVED_VIEW)
    tables[SERVED_VIEW] = served.columns
    sql = to_spark(requests_sql(spans, present, served=SERVED_VIEW), tables=tables)
    return spark.sql(hold_recursion(spark, sql, held)), held


def adapter_groups(present: set[str]) -> list[set[str]]:
    """The sources of `present` whose server rows the first step derives in one statement each: each span adapter's
    on its own, `TOGETHER`'s together; one empty group when no adapter has spans (its statement gives the columns
    and no rows). Spark plans and compiles a union of every adapter as one job graph: twice the time of its parts
    (module docstring)."""
    adapters = present & {src for src, _ in SPAN_ADAPTERS}
    groups = [adapters & TOGETHER] + [{s} for s in sorted(adapters - TOGETHER)]
    return [g for g in groups if g] or [set()]


def hold_recursion(spark, sql: str, held: list) -> str:
    """The Spark statement `sql` with each recursive CTE of its WITH run first, on its own, and read from a
    temporary view of its rows (`HELD_PREFIX` + its name) held in executor memory; the DataFrames are appended
    to `held`. A statement without a recursive CTE is returned as it is."""
    # imported on use: sqlglot 198 ms to import
    from sqlglot import exp, parse_one

    tree = parse_one(sql, read="spark")
    w = _with(tree)
    if w is None or not w.args.get("recursive"):
        return sql
    ctes, kept = list(w.expressions), []
    for i, cte in enumerate(ctes):
        name = cte.alias_or_name
        if not any(t.name == name and not t.args.get("db") for t in cte.this.find_all(exp.Table)):
            kept.append(cte)
            continue
        alone = exp.select("*").from_(name)
        for c in (*kept, cte):
            alone = alone.with_(c.args["alias"].copy(), as_=c.this.copy(), recursive=True)  # column list kept
        rows = spark.sql(alone.sql(dialect="spark")).localCheckpoint()
        view = HELD_PREFIX + name
        rows.createOrReplaceTempView(view)
        held.append(rows)
        w.set("expressions", kept + ctes[i + 1 :])
        for t in tree.find_all(exp.Table):
            if t.name == name and not t.args.get("db"):
                t.set("this", exp.to_identifier(view))
                if not t.alias:
                    t.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
    return tree.sql(dialect="spark")


def drop_held_views(spark) -> None:
    """Drop the temporary views `hold_recursion` made."""
    for t in spark.catalog.listTables():
        if t.isTemporary and t.name.startswith(HELD_PREFIX):
            spark.catalog.dropTempView(t.name)
