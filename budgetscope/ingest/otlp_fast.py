"""The first path for OTLP trace exports: decoders written in C, straight into the typed columns of `spans`,
off the GIL in the ingest reader thread. `decode` reads OTLP/JSON in the form producers write (`_otlpjson.c`),
`decode_proto` serialized protobuf `ExportTraceServiceRequest`s (`_otlpproto.c`).

Each takes a batch whole or not at all. What `decode` does not take (see the C file's header: base64 ids,
nested values, doubles it cannot print exactly as DuckDB does, anything odd) goes on to the DuckDB path
(`jsonsql`), and from there to the reference decoder; what `decode_proto` does not take (malformed wire
data, nested values, repeated fields, anything the reference would word as an error) goes to the reference
decoder `otlp_proto`. What they take they store as the path the batch takes without them stores it: a JSON
batch with span events as the reference decoder (the DuckDB path hands those on), events included, every
other JSON batch as the DuckDB path; `tests/test_otlp_fast.py` and `tests/test_otlp_proto_fast.py` hold them
to it.

When the extension was not compiled (no C compiler at install time), `AVAILABLE` is false and every batch
takes the slower paths: same rows.
"""

from __future__ import annotations

try:
    from budgetscope.ingest import _otlpjson
except ImportError:  # built without a compiler
    _otlpjson = None

AVAILABLE = _otlpjson is not None

STRING_COLUMNS = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "kind",
    "service_name",
    "scope_name",
    "status_code",
    "attributes",
    "resource",
)
INT_COLUMNS = ("batch_id", "start_ns", "end_ns")
JSON_COLUMNS = ("attributes", "resource")


def block(n: int):
    """A writable, uninitialised buffer of n bytes for the file reader, with `find(byte, start, end)` like
    bytearray's."""
    return _otlpjson.block(n)


def span_set(limit: int = 8 << 20):
    """A set of the (trace_id, span_id) pairs one ingest call decodes (64-bit hashes, 16 bytes a pair at
    most; past `limit` pairs it stops tracking and `decode` reports every chunk as possibly repeated)."""
    return _otlpjson.SpanSet(limit)


def decode(payloads: list, batch_ids: list[int], seen=None):
    """(Arrow table of the decoded spans or None, {batch id: spans} of the batches taken, ids of those left,
    repeated).

    `payloads`: bytes-like OTLP/JSON documents. A batch left goes to the next path whole. `seen`: a `span_set`
    the decoded pairs join; `repeated` is false only when none of them was in it already (nor twice in this
    call) — then the archive need not look for copies among the spans decoded with the same set."""
    return _table(_otlpjson.decode(payloads, batch_ids, seen), batch_ids)


def decode_proto(payloads: list, batch_ids: list[int], seen=None):
    """As `decode`, for serialized OTLP protobuf `ExportTraceServiceRequest`s: each span stored as the reference
    decoder (`otlp_proto`) and the staging SQL store it. A batch left goes to the reference decoder."""
    return _table(_otlpjson.decode_proto(payloads, batch_ids, seen), batch_ids)


def _table(decoded, batch_ids: list[int]):
    # imported on use: pyarrow 1027 ms to import
    import pyarrow as pa

    rows, ints, strings, spans, repeated = decoded
    taken = {b: n for b, n in zip(batch_ids, spans) if n >= 0}
    left = [b for b, n in zip(batch_ids, spans) if n < 0]
    if not rows:
        return None, taken, left, repeated
    cols = {
        name: pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(data)])
        for name, data in zip(INT_COLUMNS, ints)
    }
    for name, (offsets, data, valid) in zip(STRING_COLUMNS, strings):
        cols[name] = pa.Array.from_buffers(
            pa.large_string(),
            rows,
            [None if valid is None else pa.py_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)],
        )
        if name in JSON_COLUMNS:
            # Arrow's JSON type: DuckDB takes it into a JSON column as it is. As plain text, every document was
            # parsed again to check it (0.49 → 0.31 CPU-s inserting 100,000 vLLM journey spans); the decoder
            # writes only valid JSON (the differential tests and fuzz targets compare it with the other paths').
            cols[name] = pa.ExtensionArray.from_storage(pa.json_(pa.large_string()), cols[name])
    return pa.table(cols), taken, left, repeated
