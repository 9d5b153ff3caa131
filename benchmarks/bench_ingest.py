"""Ingest throughput: OTLP JSON lines → archive, end to end (read, hash, parse, validate, insert, derive).

    python benchmarks/bench_ingest.py [--requests 150000] [--format folder|duckdb]

Prints spans/s and MB/s for a fresh archive (the `ingest` call, and the same until the archive is closed:
DuckDB's checkpoint, or the folder's last compaction, included), the time to re-ingest the same file (all
batches known), and the archive's bytes per span.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from budgetscope.ingest.files import read_batches
from budgetscope.opener import Archive
from budgetscope.synthetic import SyntheticSpec, write_jsonl
from common import machine, peak_rss_mb


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=150_000)
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--format", choices=["folder", "duckdb"], default="folder")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    traces = out / f"ingest-{args.requests}.jsonl"
    if not traces.exists():
        t = time.perf_counter()
        write_jsonl(traces, SyntheticSpec(num_requests=args.requests, tiers=("interactive", "batch")))
        print(f"generated {traces} in {time.perf_counter() - t:.1f} s")
    size_mb = traces.stat().st_size / 1e6
    archive = out / ("ingest.duckdb" if args.format == "duckdb" else "ingest")
    shutil.rmtree(archive, ignore_errors=True)
    archive.unlink(missing_ok=True)
    a = Archive(archive)
    rep = a.ingest(read_batches(traces))
    t = time.perf_counter()
    a.close()  # DuckDB checkpoints what is still in its WAL: part of the work, even if the spans are durable
    closed = rep.seconds + time.perf_counter() - t
    rss_ingest = peak_rss_mb()
    with Archive(archive) as a:
        again = a.ingest(read_batches(traces))
    print(f"machine: {machine()}")
    print(f"file: {size_mb:,.0f} MB, {rep.spans:,} spans, {rep.requests_derived:,} requests")
    print(f"ingest: {rep.seconds:.2f} s = {rep.spans_per_s:,.0f} spans/s, {size_mb / rep.seconds:,.1f} MB/s")
    print(f"ingest and close: {closed:.2f} s = {rep.spans / closed:,.0f} spans/s")
    print(f"re-ingest of the same file: {again.seconds:.2f} s, {again.spans_inserted} spans inserted")
    if archive.is_file():
        size = os.path.getsize(archive)
    else:  # the committed segments (replaced ones wait out their grace on disk)
        from budgetscope.archive import manifest

        m = manifest.read(archive)
        size = sum(s.bytes for s in m.segments)
        print(
            "segments: "
            + ", ".join(
                f"{t} {sum(s.bytes for s in m.files(t)) / 1e6:,.1f} MB in {len(m.files(t))}"
                for t in ("spans", "requests", "ingest_batches")
            )
        )
    print(
        f"archive ({args.format}): {size / 1e6:,.0f} MB = {size / rep.spans:,.1f} bytes per span (requests and "
        f"batch records included); peak RSS {rss_ingest:,.0f} MB ({peak_rss_mb():,.0f} MB after the re-ingest)"
    )


if __name__ == "__main__":
    main()
