"""The fast path for OTLP/JSON: DuckDB's C++ JSON reader flattens, normalises, validates and inserts a whole
chunk of batches into `spans` in one statement, spread over every core.

It vouches only for what it can check. A batch goes to the reference decoder (`otlp_json`) when fewer of its
spans landed than the `"spanId"` keys in its bytes — a bad span, a field of an unexpected type (dropped by the
non-strict transform), a nested array or key/value list attribute, a span with events (only the reference
decoder keeps them), a span already stored — or when it holds no span at all (an empty export, or no trace
export). Its rows are removed in the same transaction, and the reference decoder decides, with an exact message if
the batch is bad.
"""

from __future__ import annotations

import duckdb

from budgetscope.derive.classify import SOURCE_SQL
from budgetscope.ingest import staging

_VALUE = (
    '{"stringValue":"VARCHAR","intValue":"VARCHAR","doubleValue":"DOUBLE","boolValue":"BOOLEAN",'
    '"bytesValue":"VARCHAR","arrayValue":"JSON","kvlistValue":"JSON"}'
)
_ATTRS = '[{"key":"VARCHAR","value":' + _VALUE + "}]"
_SCALAR_ARRAY = '{"values":[' + _VALUE + "]}"
STRUCTURE = (
    '{"resourceSpans":[{"resource":{"attributes":' + _ATTRS + '},"scopeSpans":[{"scope":{"name":"VARCHAR"},'
    '"spans":[{"traceId":"VARCHAR","spanId":"VARCHAR","parentSpanId":"VARCHAR","name":"VARCHAR","kind":"VARCHAR",'
    '"startTimeUnixNano":"VARCHAR","endTimeUnixNano":"VARCHAR","attributes":' + _ATTRS + ","
    '"status":{"code":"VARCHAR"},"events":"JSON"}]}]}]}'
)

# NESTED marks a value this path does not convert (a nested array or key/value list, an int it cannot read), and
# stands for the attributes of a span with events (the reference decoder keeps them): the batch goes to the
# reference decoder. It is valid JSON (a string holding an escaped NUL), so the insert
# needs no filter on it: a filter would be pushed below the projection and build every attribute string twice.
MACROS = f"""
CREATE OR REPLACE TEMP MACRO bs_scalar(v) AS CASE
  WHEN v.stringValue IS NOT NULL THEN CAST(to_json(v.stringValue) AS VARCHAR)
  WHEN v.intValue IS NOT NULL THEN coalesce(CAST(TRY_CAST(v.intValue AS HUGEINT) AS VARCHAR), '"\\u0000"')
  WHEN v.doubleValue IS NOT NULL THEN CASE WHEN isnan(v.doubleValue) THEN '"NaN"'
    WHEN isinf(v.doubleValue) THEN CASE WHEN v.doubleValue > 0 THEN '"Infinity"' ELSE '"-Infinity"' END
    ELSE CAST(to_json(v.doubleValue) AS VARCHAR) END
  WHEN v.boolValue IS NOT NULL THEN CAST(v.boolValue AS VARCHAR)
  WHEN v.bytesValue IS NOT NULL THEN CAST(to_json(v.bytesValue) AS VARCHAR)
  WHEN v.arrayValue IS NOT NULL OR v.kvlistValue IS NOT NULL THEN '"\\u0000"'
  ELSE 'null' END;
CREATE OR REPLACE TEMP MACRO bs_value(v) AS CASE
  WHEN v.arrayValue IS NOT NULL THEN '[' || array_to_string(list_transform(
      json_transform(v.arrayValue, '{_SCALAR_ARRAY}').values, lambda e: bs_scalar(e)), ',') || ']'
  ELSE bs_scalar(v) END;
CREATE OR REPLACE TEMP MACRO bs_attrs(a) AS
  '{{' || coalesce(array_to_string(list_transform(a, lambda x: CAST(to_json(x.key) AS VARCHAR) || ':' || bs_value(x.value)), ','), '') || '}}';
"""

_FLATTEN = f"""
WITH p AS (SELECT batch_id, json_transform(doc, '{STRUCTURE}') AS d FROM @RAW@ @WHERE@),
rs AS (SELECT batch_id, unnest(d.resourceSpans) AS r FROM p),
ss AS (SELECT batch_id, bs_attrs(r.resource.attributes) AS res,
         list_filter(r.resource.attributes, lambda a: a.key = 'service.name')[1].value.stringValue AS service,
         unnest(r.scopeSpans) AS s FROM rs),
sp AS (SELECT batch_id, res, service, s.scope.name AS scope_name, unnest(s.spans) AS x FROM ss)
SELECT batch_id, x.traceId AS trace_id, x.spanId AS span_id, x.parentSpanId AS parent_span_id, x.name AS name,
  x.kind AS kind, x.startTimeUnixNano AS start_raw, x.endTimeUnixNano AS end_raw, service AS service_name,
  scope_name, x.status.code AS status_raw,
  CASE WHEN coalesce(json_array_length(x.events), 0) > 0 THEN '"\\u0000"' ELSE bs_attrs(x.attributes) END
    AS attributes,
  res AS resource
FROM sp"""

_COLS = (
    "trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, service_name, scope_name, status_code, "
    "attributes, resource, source, batch_id"
)

# Spans that pass validation land directly; those already stored are removed right after (the batch then counts
# fewer spans than its bytes and goes to the reference path). An anti-join in the INSERT would build its hash
# table over every stored span, 0.2 s per call on a 1M-span archive even for one small batch; this join builds it
# over the chunk's new rows and only scans the stored ones.
_INSERT = f"""
INSERT INTO spans SELECT {_COLS} FROM (@NORMALISED@) n WHERE err IS NULL"""

# The C decoder's columns are already normalised and checked: only the adapter is left to decide.
_INSERT_DECODED = f"""
INSERT INTO spans SELECT trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, service_name, scope_name,
  status_code, attributes, resource, {SOURCE_SQL} AS source, batch_id FROM bs_dec"""

_DROP_STORED = """
DELETE FROM spans WHERE rowid IN (
  SELECT n.rowid FROM spans n JOIN spans s ON s.trace_id = n.trace_id AND s.span_id = n.span_id
  WHERE n.batch_id >= ? AND s.batch_id < ?)"""

# A hash collision can only report copies that are not there; the exact pass below then removes nothing.
_INNER_DUPLICATES = "SELECT count(*) - count(DISTINCT hash(trace_id, span_id)) FROM spans WHERE batch_id >= ?"

_DROP_LATER_COPIES = """
DELETE FROM spans WHERE batch_id >= ? AND rowid IN (
  SELECT rowid FROM (SELECT rowid, row_number() OVER (PARTITION BY trace_id, span_id ORDER BY batch_id, rowid) AS rn
                     FROM spans WHERE batch_id >= ?) WHERE rn > 1)"""

# Flattened batches holding the NESTED marker (or a string with an escaped NUL: the reference path takes those
# too). The C decoder never writes a NUL: it leaves such batches here.
_NESTED = """
SELECT DISTINCT batch_id FROM spans WHERE batch_id >= ? AND batch_id IN (SELECT batch_id FROM bs_raw)
  AND (contains(CAST(attributes AS VARCHAR), '\\u0000') OR contains(CAST(resource AS VARCHAR), '\\u0000'))"""

# A document without a span proves nothing by its count: the reference decoder says whether it is a trace export
# (an empty one lands as a batch of no spans) or not (`{"resourceSpans": [[[…]]]}` had landed as an empty batch).
_WITHOUT_SPANS = "SELECT batch_id FROM bs_raw WHERE expected = 0"


def _insert(flatten: str) -> str:
    return _INSERT.replace("@NORMALISED@", staging.normalise("(" + flatten + ")"))


def setup(con) -> None:
    con.execute(MACROS)


def land(con, decoded, raw, expected: dict[int, int], first_id: int, older_than: int | None = None) -> list[int]:
    """Insert the vouched-for spans of a chunk's JSON batches straight into `spans`, as the first statements
    of the caller's transaction: `decoded`, the spans the C decoder took (`otlp_fast`), and `raw`, an Arrow
    table (batch_id, doc, expected) of the documents it left, flattened here. Either may be None. Returns the
    batch ids the reference decoder must take; their rows are removed.

    A batch is vouched for when every one of its spans landed: as many as the `"spanId"` keys in its bytes.
    Anything else (a bad span, a field of an unexpected type, a nested value, a span already stored, a
    document without a span) sends the whole batch to the reference path, which decides.

    `older_than`: when the caller knows the chunk's spans are distinct from each other and from every span
    with batch_id in [older_than, first_id) (the C decoder's span set), copies are looked for only among the
    spans below `older_than`, and not at all when it is 0. None: looked for everywhere.
    """
    tables = {name: t for name, t in (("bs_dec", decoded), ("bs_raw", raw)) if t is not None}
    flatten = _FLATTEN.replace("@RAW@", "bs_raw") if raw is not None else None
    for name, t in tables.items():
        con.register(name, t)
    try:
        return _land(con, decoded is not None, flatten, expected, first_id, older_than)
    except (duckdb.Error, UnicodeDecodeError):
        if flatten is None:
            raise
        # A batch that is not JSON fails the whole statement and the transaction (which also forgets the
        # registered tables): start the transaction again and flatten only the valid documents. DuckDB's
        # message quotes the document, and when that is not UTF-8 the error arrives as a UnicodeDecodeError
        # (found by fuzz/targets.py otlpjson_diff; it had aborted the whole ingest).
        con.execute("ROLLBACK")
        con.execute("BEGIN TRANSACTION")
        for name, t in tables.items():
            con.register(name, t)
        return _land(
            con,
            decoded is not None,
            flatten.replace("@WHERE@", "WHERE json_valid(doc)"),
            expected,
            first_id,
            older_than,
        )
    finally:
        for name in tables:
            con.unregister(name)


def _land(
    con, decoded: bool, flatten: str | None, expected: dict[int, int], first_id: int, older_than: int | None
) -> list[int]:
    if decoded:
        con.execute(_INSERT_DECODED)
    if flatten is not None:
        con.execute(_insert(flatten.replace("@WHERE@", "")))
    if older_than is None:
        con.execute(_DROP_STORED, [first_id, first_id])
        (dups,) = con.execute(_INNER_DUPLICATES, [first_id]).fetchall()[0]
        if dups:
            con.execute(_DROP_LATER_COPIES, [first_id, first_id])
    elif older_than:
        con.execute(_DROP_STORED, [first_id, older_than])
    landed = dict(
        con.execute("SELECT batch_id, count(*) FROM spans WHERE batch_id >= ? GROUP BY 1", [first_id]).fetchall()
    )
    suspect = {b for b, n in expected.items() if landed.get(b, 0) != n}
    if flatten is not None:
        suspect |= {b for (b,) in con.execute(_WITHOUT_SPANS).fetchall()}
        suspect |= {b for (b,) in con.execute(_NESTED, [first_id]).fetchall()}
    if suspect:
        con.execute("DELETE FROM spans WHERE batch_id IN (SELECT unnest(?::BIGINT[]))", [sorted(suspect)])
    return sorted(suspect)
