"""`requests` derived on Spark from a view of spans, in two steps: the span adapters' server rows first, held in
executor memory (`localCheckpoint`), then the client join and the row checks over them.

One statement, as DuckDB runs it, does not finish on Spark once llm-d's spans are present: its server rows read
the ancestry joins of `derive/llmd.py` four times and vLLM's rows twice, and the derivation refers to the server
rows three times, so Spark's analyzer (DeduplicateRelations, Spark 4.x) walks a plan of hundreds of self-joins and
ran out of a 4 GB driver on 12 requests (docs/scale.md). Cut there, the analyzer sees the first step's result as a
table. The rows are the same as DuckDB's (tests/test_spark.py).
"""

from __future__ import annotations

from budgetscope.derive.requests import requests_sql, served_sql
from budgetscope.spark.dialect import archive_columns, to_spark

SERVED_VIEW = "bs_served"
"""The temporary view that holds the first step's rows while the second runs."""


def requests_frame(spark, spans: str, present: set[str], tables: dict[str, list[str]] | None = None):
    """(the DataFrame of `requests` rows derived from the view `spans` (adapters of the sources `present`), the
    first step's DataFrame: unpersist it when the rows have been read)."""
    tables = {**archive_columns(), **(tables or {})}
    served = spark.sql(to_spark(served_sql(spans, present), tables=tables)).localCheckpoint()
    served.createOrReplaceTempView(SERVED_VIEW)
    tables[SERVED_VIEW] = served.columns
    return spark.sql(to_spark(requests_sql(spans, present, served=SERVED_VIEW), tables=tables)), served
