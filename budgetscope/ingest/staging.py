"""Staging: every decoded span is normalised and validated here by one SQL expression, whatever decoded it,
and the good batches of a chunk land in `spans` in one transaction (atomic; duplicates skipped)."""

from __future__ import annotations

from budgetscope.derive.classify import SOURCE_SQL

DECODED_COLUMNS = (
    "batch_id",
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "kind",
    "start_ns",
    "end_ns",
    "service_name",
    "scope_name",
    "status_code",
    "attributes",
    "resource",
)
"""The columns every decoder's spans have once normalised, in `staged`'s order (before `source` and `err`)."""

STAGED_DDL = """
CREATE TEMP TABLE IF NOT EXISTS staged (
  batch_id BIGINT, trace_id VARCHAR, span_id VARCHAR, parent_span_id VARCHAR, name VARCHAR, kind VARCHAR,
  start_ns BIGINT, end_ns BIGINT, service_name VARCHAR, scope_name VARCHAR, status_code VARCHAR,
  attributes VARCHAR, resource VARCHAR, source VARCHAR, err VARCHAR
)"""

MACROS = r"""
CREATE OR REPLACE TEMP MACRO bs_b64id(x, nbytes) AS CASE
  WHEN regexp_full_match(lower(x), '[0-9a-f]+') AND length(x) = 2 * nbytes THEN lower(x)
  WHEN octet_length(TRY(from_base64(x))) = nbytes THEN lower(hex(from_base64(x)))
  END;
CREATE OR REPLACE TEMP MACRO bs_id16(x) AS CASE
  WHEN x IS NULL OR x = '' THEN NULL
  WHEN regexp_full_match(x, '[0-9a-f]{32}') THEN x
  ELSE bs_b64id(x, 16) END;
CREATE OR REPLACE TEMP MACRO bs_id8(x) AS CASE
  WHEN x IS NULL OR x = '' THEN NULL
  WHEN regexp_full_match(x, '[0-9a-f]{16}') THEN x
  ELSE bs_b64id(x, 8) END;
CREATE OR REPLACE TEMP MACRO bs_ns(x) AS coalesce(
  TRY_CAST(x AS BIGINT),
  CASE WHEN TRY_CAST(x AS DOUBLE) = round(TRY_CAST(x AS DOUBLE)) THEN TRY_CAST(TRY_CAST(x AS DOUBLE) AS BIGINT) END);
CREATE OR REPLACE TEMP MACRO bs_kind(k) AS CASE
  WHEN k IN ('0', '1', '2', '3', '4', '5')
    THEN ['UNSPECIFIED', 'INTERNAL', 'SERVER', 'CLIENT', 'PRODUCER', 'CONSUMER'][CAST(k AS INTEGER) + 1]
  WHEN upper(k) IN ('UNSPECIFIED', 'INTERNAL', 'SERVER', 'CLIENT', 'PRODUCER', 'CONSUMER') THEN upper(k)
  WHEN starts_with(upper(k), 'SPAN_KIND_')
    AND upper(k)[11:] IN ('UNSPECIFIED', 'INTERNAL', 'SERVER', 'CLIENT', 'PRODUCER', 'CONSUMER') THEN upper(k)[11:]
  ELSE 'UNSPECIFIED' END;
CREATE OR REPLACE TEMP MACRO bs_status(s) AS CASE
  WHEN s IN ('0', '1', '2') THEN ['UNSET', 'OK', 'ERROR'][CAST(s AS INTEGER) + 1]
  WHEN upper(s) IN ('UNSET', 'OK', 'ERROR') THEN upper(s)
  WHEN starts_with(upper(s), 'STATUS_CODE_') AND upper(s)[13:] IN ('UNSET', 'OK', 'ERROR') THEN upper(s)[13:]
  ELSE 'UNSET' END;
"""


def normalise(raw: str) -> str:
    """SELECT over `raw` (columns batch_id, trace_id, span_id, parent_span_id, name, kind, start_raw, end_raw,
    service_name, scope_name, status_raw, attributes, resource) giving `staged` rows, `err` = first problem."""
    return f"""
SELECT batch_id, tid AS trace_id, sid AS span_id, pid AS parent_span_id, name, bs_kind(kind) AS kind, start_ns, end_ns,
  service_name, scope_name, bs_status(status_raw) AS status_code, attributes, resource, {SOURCE_SQL} AS source,
  CASE
    WHEN trace_id IS NULL OR trace_id = '' THEN format('span {{}} has no traceId', to_json(name))
    WHEN tid IS NULL THEN format('span {{}} has an invalid traceId {{}} (want 32 hex digits)', to_json(name), to_json(trace_id))
    WHEN span_id IS NULL OR span_id = '' THEN format('span {{}} has no spanId', to_json(name))
    WHEN sid IS NULL THEN format('span {{}} has an invalid spanId {{}} (want 16 hex digits)', to_json(name), to_json(span_id))
    WHEN parent_span_id IS NOT NULL AND parent_span_id <> '' AND pid IS NULL
      THEN format('span {{}} has an invalid parentSpanId {{}} (want 16 hex digits)', to_json(name), to_json(parent_span_id))
    WHEN start_raw IS NULL OR start_raw = '0' THEN format('span {{}} ({{}}) has no startTimeUnixNano', sid, to_json(name))
    WHEN start_ns IS NULL OR start_ns < 0 THEN format('span {{}} ({{}}) has an invalid startTimeUnixNano {{}}', sid, to_json(name), to_json(start_raw))
    WHEN end_raw IS NULL OR end_raw = '0' THEN format('span {{}} ({{}}) has no endTimeUnixNano', sid, to_json(name))
    WHEN end_ns IS NULL OR end_ns < 0 THEN format('span {{}} ({{}}) has an invalid endTimeUnixNano {{}}', sid, to_json(name), to_json(end_raw))
    WHEN end_ns < start_ns THEN format('span {{}} ({{}}) ends before it starts (by {{}} ns)', sid, to_json(name), start_ns - end_ns)
  END AS err
FROM (SELECT * REPLACE (coalesce(name, '') AS name), bs_id16(trace_id) AS tid, bs_id8(span_id) AS sid,
             bs_id8(parent_span_id) AS pid, bs_ns(start_raw) AS start_ns, bs_ns(end_raw) AS end_ns
      FROM {raw})"""


ERRORS = "SELECT batch_id, arg_min(err, rowid) FROM staged WHERE err IS NOT NULL GROUP BY batch_id"

_COLS = (
    "trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, service_name, scope_name, status_code, "
    "attributes, resource, source, batch_id"
)

# Spans of good batches that are new to the archive. A chunk rarely repeats a span within itself; when it
# does, the first copy (lowest batch id) wins.
INSERT_NEW_DEDUP = f"""
INSERT INTO spans SELECT {_COLS} FROM (
  SELECT * FROM staged WHERE err IS NULL AND batch_id NOT IN (SELECT batch_id FROM rejected)
  QUALIFY row_number() OVER (PARTITION BY trace_id, span_id ORDER BY batch_id) = 1) n
WHERE NOT EXISTS (SELECT 1 FROM spans s WHERE s.trace_id = n.trace_id AND s.span_id = n.span_id)"""


REJECTED_DDL = "CREATE TEMP TABLE IF NOT EXISTS rejected (batch_id BIGINT, err VARCHAR)"


def setup(con) -> None:
    """Create the staging tables and macros on this connection."""
    con.execute(STAGED_DDL)
    con.execute(MACROS)
    con.execute(REJECTED_DDL)


def validate(con) -> dict[int, str]:
    """Batch id → its first error, for every staged batch that has a bad span."""
    return dict(con.execute(ERRORS).fetchall())


def clear(con) -> None:
    """Empty the staging tables: dropped and made again, not emptied by DELETE, whose rows keep their memory until a
    checkpoint (a working set makes none of its own: archive/duckdb_archive.WORKING_SET)."""
    for table, ddl in (("staged", STAGED_DDL), ("rejected", REJECTED_DDL)):
        con.execute(f"DROP TABLE IF EXISTS {table}")
        con.execute(ddl)
