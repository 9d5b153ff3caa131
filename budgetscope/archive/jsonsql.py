"""The fast path for OTLP/JSON: DuckDB's C++ JSON reader flattens whole chunks of batches into `staged`.

It vouches only for what it can check. A batch goes to the reference decoder (`otlp_json`) when:
its span count disagrees with the count of `"spanId"` keys in its bytes (a field of an unexpected type was
dropped), an attribute holds a nested array or key/value list, or it is not a JSON object with a
`resourceSpans` list. The reference decoder then decides, with an exact message if the batch is bad.
"""

from __future__ import annotations

import duckdb

from budgetscope.archive import staging

_VALUE = ('{"stringValue":"VARCHAR","intValue":"VARCHAR","doubleValue":"DOUBLE","boolValue":"BOOLEAN",'
          '"bytesValue":"VARCHAR","arrayValue":"JSON","kvlistValue":"JSON"}')
_ATTRS = '[{"key":"VARCHAR","value":' + _VALUE + '}]'
_SCALAR_ARRAY = '{"values":[' + _VALUE + ']}'
STRUCTURE = (
    '{"resourceSpans":[{"resource":{"attributes":' + _ATTRS + '},"scopeSpans":[{"scope":{"name":"VARCHAR"},'
    '"spans":[{"traceId":"VARCHAR","spanId":"VARCHAR","parentSpanId":"VARCHAR","name":"VARCHAR","kind":"VARCHAR",'
    '"startTimeUnixNano":"VARCHAR","endTimeUnixNano":"VARCHAR","attributes":' + _ATTRS + ','
    '"status":{"code":"VARCHAR"}}]}]}]}'
)

# chr(0) marks a value this path does not convert (nested array or key/value list): the batch goes to Python.
MACROS = f"""
CREATE OR REPLACE TEMP MACRO bs_scalar(v) AS CASE
  WHEN v.stringValue IS NOT NULL THEN CAST(to_json(v.stringValue) AS VARCHAR)
  WHEN v.intValue IS NOT NULL THEN CAST(CAST(v.intValue AS HUGEINT) AS VARCHAR)
  WHEN v.doubleValue IS NOT NULL THEN CASE WHEN isnan(v.doubleValue) THEN '"NaN"'
    WHEN isinf(v.doubleValue) THEN CASE WHEN v.doubleValue > 0 THEN '"Infinity"' ELSE '"-Infinity"' END
    ELSE CAST(to_json(v.doubleValue) AS VARCHAR) END
  WHEN v.boolValue IS NOT NULL THEN CAST(v.boolValue AS VARCHAR)
  WHEN v.bytesValue IS NOT NULL THEN CAST(to_json(v.bytesValue) AS VARCHAR)
  WHEN v.arrayValue IS NOT NULL OR v.kvlistValue IS NOT NULL THEN chr(0)
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
  scope_name, x.status.code AS status_raw, bs_attrs(x.attributes) AS attributes, res AS resource
FROM sp"""

_SUSPECT = """
SELECT r.batch_id FROM @RAW@ r
LEFT JOIN (SELECT batch_id, count(*) AS n, bool_or(contains(attributes, chr(0)) OR contains(resource, chr(0))) AS nested
           FROM staged WHERE batch_id IN (SELECT batch_id FROM @RAW@) GROUP BY batch_id) s USING (batch_id)
WHERE coalesce(s.n, 0) <> r.expected OR coalesce(s.nested, false)
   OR (r.expected = 0 AND NOT @HAS_LIST@)"""


def _insert(flatten: str) -> str:
    return f"INSERT INTO staged {staging.normalise('(' + flatten + ')')}"


def setup(con) -> None:
    con.execute(MACROS)


def stage(con, raw_name: str) -> list[int]:
    """Flatten the batches of the registered table `raw_name` (batch_id, doc, expected) into `staged`.

    Returns the batch ids the reference decoder must take instead; their rows are removed from `staged`.
    """
    has_list = "coalesce(json_type(r.doc, '$.resourceSpans') = 'ARRAY', false)"
    try:
        con.execute(_insert(_FLATTEN.replace("@RAW@", raw_name).replace("@WHERE@", "")))
        suspect_sql = _SUSPECT.replace("@RAW@", raw_name).replace("@HAS_LIST@", has_list)
    except duckdb.Error:
        # A batch that is not JSON at all fails the whole statement: flatten only the valid ones.
        con.execute(_insert(_FLATTEN.replace("@RAW@", raw_name).replace("@WHERE@", "WHERE json_valid(doc)")))
        suspect_sql = _SUSPECT.replace("@RAW@", raw_name).replace("@HAS_LIST@", f"CASE WHEN json_valid(r.doc) THEN {has_list} ELSE false END")
    suspect = [b for (b,) in con.execute(suspect_sql).fetchall()]
    if suspect:
        con.execute("DELETE FROM staged WHERE batch_id IN (SELECT unnest(?::BIGINT[]))", [suspect])
    return suspect
