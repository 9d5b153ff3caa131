"""Probe (not a benchmark of shipped code): how fast would landing spans be with a different archive layout?

Lands the ingest benchmark's file (bench-out/ingest-150000.jsonl, written by bench_ingest.py) chunk by chunk into
a scratch table `s2` through the real fast-path SQL, in one of four layouts, and prints insert, commit and
checkpoint time. No dedup, no derivation, no bookkeeping: only the part the layout changes.

    python benchmarks/probe_ingest_layout.py base|binary|noattrs|both|hot|rawlist

base: the archive's `spans` layout. binary: trace/span ids as UHUGEINT/UBIGINT instead of hex text. noattrs:
no per-span attribute JSON built (an upper bound for "hot attributes as columns": extracting those columns
is not measured). both: the two together. hot: binary ids plus the twelve attributes the native adapter reads
as typed columns (each found in the span's key/value list by key) and the rest as JSON: what "hot attributes
as columns" costs when the extraction is paid for. rawlist: binary ids, attributes stored as the parsed
key/value list (no JSON built). Results in docs/benchmarks.md. It measures the DuckDB path's SQL, so the C
decoder (which now takes these batches first) is switched off here.
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from budgetscope.ingest import batches as A
from budgetscope.ingest import jsonsql, otlp_fast, staging
from budgetscope.ingest.files import read_batches

otlp_fast.AVAILABLE = False  # every batch through the DuckDB path, whose SQL the layouts change
variant = sys.argv[1]


def chunks():
    items = []
    size = 0
    nid = 1
    for rb in read_batches("bench-out/ingest-150000.jsonl"):
        items.append((nid, str(nid), rb))
        nid += 1
        size += len(rb.payload)
        if size > 128 << 20:
            yield A.chunk(items, len(items), [])
            items = []
            size = 0
    if items:
        yield A.chunk(items, len(items), [])


chs = list(chunks())
p = "bench-out/probe-layout.duckdb"
for f in (p, p + ".wal"):
    if os.path.exists(f):
        os.unlink(f)
a = A.Archive(p)
con = a.con
flat = jsonsql._FLATTEN.replace("@RAW@", "bs_raw").replace("@WHERE@", "")
HOT = {
    "gen_ai.request.model": ("VARCHAR", "stringValue"),
    "gen_ai.response.id": ("VARCHAR", "stringValue"),
    "gen_ai.operation.name": ("VARCHAR", "stringValue"),
    "gen_ai.usage.input_tokens": ("BIGINT", "intValue"),
    "gen_ai.usage.output_tokens": ("BIGINT", "intValue"),
    "gen_ai.usage.cache_read.input_tokens": ("BIGINT", "intValue"),
    "budgetscope.tier": ("VARCHAR", "stringValue"),
    "budgetscope.tenant": ("VARCHAR", "stringValue"),
    "budgetscope.outcome": ("VARCHAR", "stringValue"),
    "budgetscope.stage": ("VARCHAR", "stringValue"),
    "budgetscope.decode.steps": ("BIGINT", "intValue"),
    "budgetscope.first_token_unix_nano": ("BIGINT", "intValue"),
}
if variant == "hot":
    hot_cols = ", ".join(f'"{k}" {t}' for k, (t, _) in HOT.items())
    con.execute(
        f"CREATE TABLE s2 (trace_id UHUGEINT, span_id UBIGINT, parent_span_id UBIGINT, name VARCHAR, kind VARCHAR, start_ns BIGINT, end_ns BIGINT, service_name VARCHAR, scope_name VARCHAR, status_code VARCHAR, {hot_cols}, attributes JSON, resource JSON, source VARCHAR, batch_id BIGINT)"
    )
    ids = "('0x' || trace_id)::UHUGEINT, ('0x' || span_id)::UBIGINT, ('0x' || parent_span_id)::UBIGINT"
    keys = "[" + ",".join(f"'{k}'" for k in HOT) + "]"
    flat = flat.replace("bs_attrs(x.attributes) AS attributes", "x.attributes AS attributes")
    rest = ", ".join(
        f"CAST(list_filter(attributes, lambda e: e.key = '{k}')[1].value.{f} AS {t})" for k, (t, f) in HOT.items()
    )
    rest += f", bs_attrs(list_filter(attributes, lambda e: NOT list_contains({keys}, e.key)))"
elif variant == "rawlist":
    con.execute(
        "CREATE TABLE s2 (trace_id UHUGEINT, span_id UBIGINT, parent_span_id UBIGINT, name VARCHAR, kind VARCHAR, start_ns BIGINT, end_ns BIGINT, service_name VARCHAR, scope_name VARCHAR, status_code VARCHAR, attributes STRUCT(key VARCHAR, value STRUCT(stringValue VARCHAR, intValue VARCHAR, doubleValue DOUBLE, boolValue BOOLEAN, bytesValue VARCHAR, arrayValue JSON, kvlistValue JSON))[], resource JSON, source VARCHAR, batch_id BIGINT)"
    )
    ids = "('0x' || trace_id)::UHUGEINT, ('0x' || span_id)::UBIGINT, ('0x' || parent_span_id)::UBIGINT"
    flat = flat.replace("bs_attrs(x.attributes) AS attributes", "x.attributes AS attributes")
elif variant in ("binary", "both"):
    con.execute(
        "CREATE TABLE s2 (trace_id UHUGEINT, span_id UBIGINT, parent_span_id UBIGINT, name VARCHAR, kind VARCHAR, start_ns BIGINT, end_ns BIGINT, service_name VARCHAR, scope_name VARCHAR, status_code VARCHAR, attributes JSON, resource JSON, source VARCHAR, batch_id BIGINT)"
    )
    ids = "('0x' || trace_id)::UHUGEINT, ('0x' || span_id)::UBIGINT, ('0x' || parent_span_id)::UBIGINT"
else:
    con.execute("CREATE TABLE s2 AS SELECT * FROM spans LIMIT 0")
    ids = "trace_id, span_id, parent_span_id"
if variant in ("noattrs", "both"):
    flat = flat.replace("bs_attrs(x.attributes) AS attributes", "'{}' AS attributes")
attrs = rest if variant == "hot" else "attributes"
sql = f"INSERT INTO s2 SELECT {ids}, name, kind, start_ns, end_ns, service_name, scope_name, status_code, {attrs}, resource, source, batch_id FROM ({staging.normalise('(' + flat + ')')}) WHERE err IS NULL"
if variant in ("hot", "rawlist"):  # the source classification reads the attribute JSON, which is a list here
    sql = sql.replace(
        "json_exists(attributes, '$.rid')", "list_contains(list_transform(attributes, lambda e: e.key), 'rid')"
    )
T0 = time.perf_counter()
land = 0
commit = 0
for c in chs:
    con.register("bs_raw", c.raw_json)
    con.execute("BEGIN")
    t = time.perf_counter()
    con.execute(sql)
    t1 = time.perf_counter()
    con.execute("COMMIT")
    t2 = time.perf_counter()
    land += t1 - t
    commit += t2 - t1
t = time.perf_counter()
con.execute("CHECKPOINT")
ck = time.perf_counter() - t
print(
    f"{variant:8s} insert {land:.2f} commit {commit:.2f} checkpoint {ck:.2f} total {time.perf_counter() - T0:.2f}  file {os.path.getsize(p) / 1e6:.0f} MB"
)
