"""Traces split across the shards of a sharded root, joined when the root is read.

A trace's spans reach two shards when the load balancer's shard list changes while it is in flight, a collector
restarts, or a client exports to another collector than its server. Each shard then derives its own partial
`requests` row: a server row with no client span, a client row whose whole E2E is unaccounted, or a root row with
every stage 0. A reader of the root finds these traces (a trace id in the `spans` of more than one shard), derives
each one's row from all its spans (deduplicated by span id, as one archive's ingest does) with the writer's own
derivation, and reads that row in place of the shards' partial ones. The report says how many traces were split.

    sql, n = join_split_traces(con, root, groups, stored_requests_sql)

The cost is one pass over the trace ids of every shard's `spans` when the root is opened (a distinct per shard);
the derivation runs over the split traces' spans only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from budgetscope import schema
from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.segments import sql_list

SPLIT_TABLE = "bs_reader.split_traces"
"""The trace ids seen on more than one shard of this read."""
SPLIT_SPANS = "bs_reader.split_spans"
"""Every span of those traces, once per (trace_id, span_id)."""
SPLIT_ROWS = "bs_reader.split_requests"
"""Their `requests` rows, derived from all their spans."""


def split_traces_sql(root: Path, groups: list[dict]) -> str:
    """SELECT of the trace ids whose spans are in more than one of `groups` (one dict of segments a shard)."""
    per_shard = " UNION ALL ".join(
        f"SELECT DISTINCT trace_id, {i} AS shard FROM read_parquet({sql_list(root, g['spans'])}, "
        "hive_partitioning = false)"
        for i, g in enumerate(groups)
        if g["spans"]
    )
    return f"SELECT trace_id FROM ({per_shard}) GROUP BY trace_id HAVING count(*) > 1"


def split_spans_sql(spans: str, split: str) -> str:
    """SELECT of the spans of `spans` whose trace is in `split`, one per (trace_id, span_id) (DuckDB SQL that
    Spark runs transpiled)."""
    cols = ", ".join(c.name for c in schema.SPANS.columns)
    return (
        f"SELECT {cols} FROM (SELECT s.*, row_number() OVER (PARTITION BY s.trace_id, s.span_id ORDER BY "
        f"s.batch_id, s.start_ns) AS bs_n FROM {spans} s WHERE s.trace_id IN (SELECT trace_id FROM {split})) t "
        "WHERE bs_n = 1"
    )


def join_split_traces(
    con, root: Path, groups: list[dict], stored: str, requests_sql: Callable[[str, set[str]], str] | None
) -> tuple[str, int]:
    """(`requests` as the SELECT `stored` with the rows of split traces replaced by rows derived from all their
    spans by `requests_sql` (the writer's derivation, `derive.requests.requests_sql`), the number of split
    traces). Creates the tables above in the DuckDB connection `con`."""

    if sum(1 for g in groups if g["spans"]) < 2:  # one shard with spans: nothing can be split
        return stored, 0
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {SPLIT_TABLE.split('.')[0]}")
    con.execute(f"CREATE TABLE {SPLIT_TABLE} AS {split_traces_sql(root, groups)}")
    (n,) = con.execute(f"SELECT count(*) FROM {SPLIT_TABLE}").fetchone()
    if not n:
        return stored, 0
    if requests_sql is None:
        raise ArchiveError(
            f"{root}: {n:,} traces have spans on several shards; reading them needs the "
            "derivation (open the root with budgetscope.archive.open)"
        )
    spans_cols = ", ".join(c.name for c in schema.SPANS.columns)
    every = " UNION ALL ".join(
        f"SELECT {spans_cols} FROM read_parquet({sql_list(root, g['spans'])}, hive_partitioning = false)"
        for g in groups
        if g["spans"]
    )
    con.execute(f"CREATE TABLE {SPLIT_SPANS} AS {split_spans_sql(f'({every})', SPLIT_TABLE)}")
    present = {src for (src,) in con.execute(f"SELECT DISTINCT source FROM {SPLIT_SPANS}").fetchall()}
    cols = ", ".join(c.name for c in schema.REQUESTS.columns)
    con.execute(f"CREATE TABLE {SPLIT_ROWS} AS SELECT {cols} FROM ({requests_sql(SPLIT_SPANS, present)})")
    return (
        f"SELECT {cols} FROM ({stored}) q WHERE q.trace_id NOT IN (SELECT trace_id FROM {SPLIT_TABLE}) "
        f"UNION ALL SELECT {cols} FROM {SPLIT_ROWS}"
    ), n
