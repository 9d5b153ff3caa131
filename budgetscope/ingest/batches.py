"""Batches as they arrive (`RawBatch`), and their grouping into chunks that land in one transaction each.

Every source of spans (trace files, the collector, scrapes) hands the archive `RawBatch`es; `chunks` skips
those whose bytes were seen before, groups the rest into about CHUNK_BYTES, and decodes the OTLP/JSON and
OTLP protobuf ones with the C decoders where they are compiled; `prefetch` runs that one chunk ahead in a
thread.
"""

from __future__ import annotations

import hashlib
import itertools
import queue
import threading
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from budgetscope.archive.spool import RawBatch
from budgetscope.ingest import otlp_fast, otlp_json, otlp_metrics

# pyarrow is imported in the functions that build tables: 180 ms to import (python -X importtime, 2 cores),
# paid only by a process that decodes.

CHUNK_BYTES = 128 << 20
"""Payload bytes gathered before a chunk is staged and committed (docs/benchmarks.md, "CHUNK_BYTES")."""


@dataclass(slots=True)
class Chunk:
    """Batches new to the archive, ready to land: the JSON and protobuf ones the C decoders took already
    decoded, the other JSON ones as an Arrow table of documents for the DuckDB path."""

    items: list[tuple[int, str, RawBatch]]  # (batch id, content hash, batch)
    decoded: object  # pyarrow.Table of the spans the C decoders took (otlp_fast, JSON and protobuf), or None
    raw_json: object  # pyarrow.Table (batch_id, doc, expected) of the JSON batches left, or None
    # JSON batch id → its spans (decoded, or counted on its bytes); protobuf batch id → its spans, for those
    # the C decoder took (the others go to the reference decoder)
    expected: dict[int, int]
    seen: int
    copies: list[tuple[str, str, str]]  # (hash, origin, position) of batches seen before: skipped
    c_only: bool  # every span in it came through the C decoder
    repeated: bool  # false: the C decoder saw none of its (trace_id, span_id) pairs before in this ingest call


def _binary_column(payloads: list[bytes]):
    """An Arrow string column over the payloads, built with one copy (a list of bytes objects is ~10× slower).

    No UTF-8 check here: a payload that is not UTF-8 is not valid JSON to DuckDB either, so it falls to the
    reference decoder, which rejects it with its exact message."""
    # imported on use: pyarrow 1027 ms to import
    import pyarrow as pa

    offsets = _int64_column([0, *itertools.accumulate(map(len, payloads))])
    data = pa.py_buffer(b"".join(payloads))
    return pa.Array.from_buffers(pa.large_string(), len(payloads), [None, offsets.buffers()[1], data])


def _int64_column(values: list[int]):
    """An Arrow int64 column over the buffer of an `array` (`pa.array` on Python objects imports pandas: 0.3 s)."""
    # imported on use: pyarrow 1027 ms to import
    import pyarrow as pa

    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(array("q", values))])


def chunk(items: list[tuple[int, str, RawBatch]], seen: int, copies: list, spans_seen=None) -> Chunk:
    # imported on use: pyarrow 1027 ms to import
    import pyarrow as pa

    js = [(bid, rb.payload) for bid, _, rb in items if rb.format == "otlp-json"]
    pb = [(bid, rb.payload) for bid, _, rb in items if rb.format == "otlp-proto"]
    tables, expected, repeated = [], {}, False
    if otlp_fast.AVAILABLE:
        # Both decoders add to the same span set: `repeated` covers the pairs of either.
        for fmt, decode in ((js, otlp_fast.decode), (pb, otlp_fast.decode_proto)):
            if not fmt:
                continue
            table, taken, left, rep = decode([p for _, p in fmt], [b for b, _ in fmt], spans_seen)
            if table is not None:
                tables.append(table)
            expected.update(taken)
            repeated |= rep
            left = set(left)
            fmt[:] = [(b, p) for b, p in fmt if b in left]
    else:
        repeated = True
    if not tables and not expected:
        repeated = True  # nothing went through the span set
    decoded = None if not tables else tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    expected.update((bid, otlp_json.count_spans(p)) for bid, p in js)
    # every span of the chunk came through the C decoders (metrics batches hold none)
    c_only = (
        not js and not pb and all(rb.format in ("otlp-json", "otlp-proto", *otlp_metrics.FORMATS) for _, _, rb in items)
    )
    if not js:
        return Chunk(items, decoded, None, expected, seen, copies, c_only, repeated)
    table = pa.Table.from_arrays(
        [
            _int64_column([b for b, _ in js]),
            _binary_column([p for _, p in js]),
            _int64_column([expected[b] for b, _ in js]),
        ],
        names=["batch_id", "doc", "expected"],
    )
    # Small record batches let DuckDB spread the JSON parsing over every core.
    return Chunk(
        items,
        decoded,
        pa.Table.from_batches(table.to_batches(max_chunksize=8)),
        expected,
        seen,
        copies,
        c_only,
        repeated,
    )


def content_hash(rb: RawBatch) -> str:
    """The batch's identity for idempotency: the first 128 bits of the SHA-256 of its bytes, hex. Metrics
    batches hash with their format, so the same bytes sent as a trace export stay a different batch."""
    return (
        hashlib.sha256(rb.payload)
        if rb.format not in otlp_metrics.FORMATS
        else hashlib.sha256(rb.format.encode() + b"\0" + rb.payload)
    ).hexdigest()[:32]


@dataclass(slots=True)
class Decoded:
    """Batches the C decoders took whole before they were to land (the collector's `accept`), kept decoded so
    that landing them does not decode them again: `spans[k]` is batch k's span count; each of `parts` is a
    decoder's table with the indexes of the batches whose rows it holds, in row order (its batch ids are
    placeholders, replaced when they land)."""

    batches: list[RawBatch]
    hashes: list[str]
    spans: list[int]
    parts: list[tuple[object, list[int]]]


def decoded_chunk(entries: list[Decoded], known: set[str], next_id: int, repeated: bool) -> Chunk:
    """One chunk of already decoded batches: each new to the archive gets the next batch id (its rows are
    renumbered), those seen before are skipped with their rows. `repeated`: as `chunk`'s, for the span set they
    were decoded with."""
    # imported on use: pyarrow 1027 ms to import
    import pyarrow as pa

    items: list[tuple[int, str, RawBatch]] = []
    copies: list[tuple[str, str, str]] = []
    expected: dict[int, int] = {}
    pieces, ids = [], array("q")
    for e in entries:
        bids: list[int | None] = []
        for rb, h, n in zip(e.batches, e.hashes, e.spans):
            if h in known:
                copies.append((h, rb.origin, rb.position))
                bids.append(None)
                continue
            known.add(h)
            items.append((next_id, h, rb))
            expected[next_id] = n
            bids.append(next_id)
            next_id += 1
        for table, members in e.parts:  # a batch's rows are consecutive: runs of one batch id
            if all(bids[k] is not None for k in members):
                pieces.append(table)
            else:
                at = 0
                for k in members:
                    if bids[k] is not None:
                        pieces.append(table.slice(at, e.spans[k]))
                    at += e.spans[k]
            for k in members:
                if bids[k] is not None:
                    ids += array("q", [bids[k]]) * e.spans[k]
    decoded = None
    if ids:
        decoded = pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)
        if decoded.num_rows != len(ids):
            raise AssertionError(f"decoded rows {decoded.num_rows:,} != the batches' spans {len(ids):,}")
        decoded = decoded.set_column(
            decoded.schema.get_field_index("batch_id"),
            "batch_id",
            pa.Array.from_buffers(pa.int64(), len(ids), [None, pa.py_buffer(ids)]),
        )
    return Chunk(items, decoded, None, expected, len(copies) + len(items), copies, True, repeated or bool(copies))


def chunks(batches: Iterable[RawBatch], known: set[str], next_id: int, spans_seen=None) -> Iterator[Chunk]:
    """Group batches new to the archive into chunks of about CHUNK_BYTES, skipping those seen before.
    `spans_seen`: the ingest call's `otlp_fast.span_set`, or None."""
    items: list[tuple[int, str, RawBatch]] = []
    copies: list[tuple[str, str, str]] = []
    size = seen = 0
    for rb in batches:
        seen += 1
        h = content_hash(rb)
        if h in known:
            copies.append((h, rb.origin, rb.position))  # not its bytes: a re-ingest holds no file in memory
            continue
        known.add(h)
        items.append((next_id, h, rb))
        next_id += 1
        size += len(rb.payload)
        if size >= CHUNK_BYTES:
            yield chunk(items, seen, copies, spans_seen)
            items, copies, size, seen = [], [], 0, 0
    yield chunk(items, seen, copies, spans_seen)


def prefetch(it: Iterator[Chunk]) -> Iterator[Chunk]:
    """Run `it` one chunk ahead in a thread, re-raising its errors here: the reader builds the next chunk while
    this one lands, and waits for it to have landed before it starts another (at most two chunks in memory; a
    queue of one ready chunk let a third be read meanwhile: 128 MiB of payload and its decoded table more)."""
    q: queue.SimpleQueue = queue.SimpleQueue()
    alive = threading.Semaphore(2)  # chunks in memory: the one landing and the one being read
    done = object()
    stop = threading.Event()

    def produce() -> None:
        try:
            while True:
                while not alive.acquire(timeout=0.1):
                    if stop.is_set():
                        return
                if stop.is_set():
                    return
                item = next(it, done)
                q.put(item)
                if item is done:
                    return
        except BaseException as e:  # handed to the consumer, which re-raises it
            q.put(e)

    t = threading.Thread(target=produce, name="budgetscope-ingest-reader", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
            del item  # landed: the reader may read the next
            alive.release()
    finally:
        stop.set()
        t.join()
