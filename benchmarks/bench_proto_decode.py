"""OTLP protobuf decoding: the reference decoder (`otlp_proto`, protobuf runtime + Python per span) against the
C decoder (`otlp_fast.decode_proto`), and a whole `Archive.ingest` of the same batches with each.

    python benchmarks/bench_proto_decode.py [--requests 20000] [--format folder|duckdb]

The synthetic native-contract traces (7 spans a request, 512 spans an export request) converted to protobuf
as `bench_collector.py` sends them. Prints spans/s of decoding alone (the C figure includes building the
Arrow table of the `spans` columns; the reference one stops at its Python columns, before the staging SQL
normalises them), and of the ingest call (hash, decode, stage, land, derive requests) on a fresh archive.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_collector import protobuf
from budgetscope.archive.spool import RawBatch
from budgetscope.ingest import otlp_fast, otlp_proto
from budgetscope.opener import Archive
from budgetscope.synthetic import SyntheticSpec, write_jsonl
from common import machine, peak_rss_mb


def best(f, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def ingest(archive: Path, payloads: list[bytes], c_decoder: bool):
    shutil.rmtree(archive, ignore_errors=True)
    archive.unlink(missing_ok=True)
    available = otlp_fast.AVAILABLE
    otlp_fast.AVAILABLE = available and c_decoder
    try:
        with Archive(archive) as a:
            return a.ingest(RawBatch(p, "otlp-proto", "bench", f"message {i}") for i, p in enumerate(payloads, 1))
    finally:
        otlp_fast.AVAILABLE = available


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--format", choices=["folder", "duckdb"], default="folder")
    ap.add_argument("--repeat", type=int, default=5, help="runs of the C decoder; the best is printed")
    args = ap.parse_args()
    if not otlp_fast.AVAILABLE:
        sys.exit("the C extension is not built: `make setup`")
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    traces = out / f"proto-{args.requests}.jsonl"
    if not traces.exists():
        write_jsonl(traces, SyntheticSpec(num_requests=args.requests, tiers=("interactive", "batch")))
    payloads = [protobuf(line) for line in traces.read_bytes().splitlines()]
    ids = list(range(1, len(payloads) + 1))
    mb = sum(map(len, payloads)) / 1e6

    _, taken, left, _ = otlp_fast.decode_proto(payloads, ids, otlp_fast.span_set())
    spans = sum(taken.values())
    assert not left, f"the C decoder left {len(left)} batches"
    ref = best(lambda: [otlp_proto.decode(p) for p in payloads], 1)
    c = best(lambda: otlp_fast.decode_proto(payloads, ids, otlp_fast.span_set()), args.repeat)

    archive = out / ("proto.duckdb" if args.format == "duckdb" else "proto")
    with_c = ingest(archive, payloads, True)
    without = ingest(archive, payloads, False)
    assert with_c.spans_inserted == without.spans_inserted == spans

    print(f"machine: {machine()}")
    print(f"{len(payloads)} export requests, {spans:,} spans, {mb:,.0f} MB of protobuf ({mb * 1e6 / spans:.0f} B/span)")
    print(f"decode, reference (otlp_proto): {ref:.2f} s = {spans / ref:,.0f} spans/s ({ref / spans * 1e6:.1f} us/span)")
    print(
        f"decode, C (decode_proto):       {c:.3f} s = {spans / c:,.0f} spans/s ({c / spans * 1e6:.2f} us/span), "
        f"{ref / c:,.0f}x"
    )
    print(
        f"Archive.ingest ({args.format}), reference: {without.seconds:.2f} s = {spans / without.seconds:,.0f} spans/s"
    )
    print(
        f"Archive.ingest ({args.format}), C:         {with_c.seconds:.2f} s = {spans / with_c.seconds:,.0f} spans/s, "
        f"{without.seconds / with_c.seconds:.1f}x"
    )
    print(f"peak RSS {peak_rss_mb():,.0f} MB")


if __name__ == "__main__":
    main()
