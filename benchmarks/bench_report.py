"""`report` latency over an archive of 1,000,000 requests (7,000,000 spans), built through the real ingest.

    python benchmarks/bench_report.py [--requests 1000000] [--format folder|duckdb]
    python benchmarks/bench_report.py --requests 10000000 --parts 10 --window-hour 4

Prints the first (cold process) and warm (median of the rest) report times, with budgets for two tiers.

`--parts N` builds the archive in N ingests of requests/N each, one an hour (part i arrives in hour i after
2026-01-01T00:00Z, at requests/N per hour), so that a 10M-request archive (70M spans, ~30 GB of OTLP JSON)
never needs more than one part's file on disk. `--window-hour H` also times a report over hour H alone
(`report --since/--until`), and prints which of the archive's files its reader chose to read.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from budgetscope.analysis.budgets import parse_budgets
from budgetscope.analysis.report import build_report
from budgetscope.ingest.files import read_batches
from budgetscope.opener import Archive
from budgetscope.synthetic import BUDGETS, SyntheticSpec, write_jsonl
from common import machine, peak_rss_mb

HOUR_NS = 3_600_000_000_000
START_NS = SyntheticSpec().start_ns


def build(archive: Path, n: int, out: Path, parts: int = 1) -> None:
    per = n // parts
    total_spans = total_s = 0.0
    for i in range(parts):
        traces = out / f"report-{n}-part{i}.jsonl"
        spec = (
            SyntheticSpec(num_requests=n, tiers=("interactive", "batch"), rate_per_s=500)
            if parts == 1
            else SyntheticSpec(
                num_requests=per,
                tiers=("interactive", "batch"),
                rate_per_s=per / 3600,
                seed=7 + i,
                start_ns=START_NS + i * HOUR_NS,
            )
        )
        t = time.perf_counter()
        write_jsonl(traces, spec)
        print(
            f"part {i + 1}/{parts}: generated {traces.stat().st_size / 1e9:.1f} GB in {time.perf_counter() - t:.0f} s",
            flush=True,
        )
        with Archive(archive) as a:
            rep = a.ingest(read_batches(traces))
        traces.unlink()
        total_spans += rep.spans
        total_s += rep.seconds
        print(
            f"  ingested {rep.spans:,} spans, {rep.requests_derived:,} requests in {rep.seconds:.0f} s "
            f"({rep.spans_per_s:,.0f} spans/s)",
            flush=True,
        )
    if parts > 1:
        print(f"ingested {total_spans:,.0f} spans in {total_s:.0f} s ({total_spans / total_s:,.0f} spans/s)")


def read_bytes() -> int:
    """Bytes this process has read through read(2) and pread(2) so far (Linux), page cache hits included."""
    try:
        for line in open("/proc/self/io"):
            if line.startswith("rchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def timed(archive: Path, budgets, runs: int, since_ns: int | None = None, until_ns: int | None = None) -> dict:
    """Open a reader (of the window, if any), then report `runs` times."""
    t = time.perf_counter()
    with Archive(archive, read_only=True, since_ns=since_ns, until_ns=until_ns) as a:
        opened = time.perf_counter() - t
        times, rep, read, cpu = [], None, [], []
        for _ in range(runs):
            t, b, c = time.perf_counter(), read_bytes(), time.process_time()
            rep = build_report(a.con, budgets, since_ns, until_ns)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            read.append(read_bytes() - b)
        chosen = {}
        if hasattr(a, "files"):  # a folder: the segment files its reader chose (those of the window)
            for table in ("requests", "requests_deletes", "spans", "gpu_samples"):
                files = a.files(table)
                chosen[table] = (len(files), sum(f.stat().st_size for f in files))
    return {
        "open": opened,
        "times": times,
        "cpu": cpu,
        "requests": sum(t["requests"] for t in rep["tiers"]) + sum(rep["unbudgeted_tiers"].values()),
        "files": chosen,
        "read": read,
    }


def describe(label: str, r: dict) -> str:
    ts = r["times"]
    warm = ts[1:] or ts
    return (
        f"{label}: {r['requests']:,} requests; open {r['open']:.2f} s, first {ts[0]:.2f} s, "
        f"warm median {statistics.median(warm):.2f} s (min {min(warm):.2f}, max {max(warm):.2f}, {len(warm)} runs; "
        f"CPU {statistics.median(r['cpu'][1:] or r['cpu']):.2f} s a warm run, every thread); "
        f"read {r['read'][0] / 1e6:,.0f} MB from files in the first, {statistics.median(r['read'][1:] or r['read']) / 1e6:,.0f} "
        "MB in a warm one"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--format", choices=["folder", "duckdb"], default="folder")
    ap.add_argument("--parts", type=int, default=1, help="build in this many ingests, one hour each")
    ap.add_argument("--window-hour", type=int, help="also report over this hour of the archive alone")
    ap.add_argument("--runs", type=int, default=6, help="reports per reader (the first is the cold one)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    name = f"report-{args.requests}" + (f"-p{args.parts}" if args.parts > 1 else "")
    archive = out / f"{name}{'.duckdb' if args.format == 'duckdb' else ''}"
    if not archive.exists():
        build(archive, args.requests, out, args.parts)
    budgets = parse_budgets(BUDGETS)
    load = os.getloadavg()[0]
    with Archive(archive, read_only=True) as a:
        counts = a.counts()
        everything = (
            {
                t: (len(a.files(t)), sum(f.stat().st_size for f in a.files(t)))
                for t in ("requests", "requests_deletes", "spans", "gpu_samples")
            }
            if hasattr(a, "files")
            else {}
        )
    whole = timed(archive, budgets, args.runs)
    print(f"machine: {machine()}; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"archive ({args.format}): {counts['requests']:,} requests, {counts['spans']:,} spans")
    print(describe("report, whole archive", whole))
    if args.window_hour is not None:
        lo = START_NS + args.window_hour * HOUR_NS
        win = timed(archive, budgets, args.runs, lo, lo + HOUR_NS)
        print(
            describe(
                f"report, hour {args.window_hour} ({time.strftime('%Y-%m-%dT%H:00Z', time.gmtime(lo / 1e9))} "
                f"for one hour)",
                win,
            )
        )
        print("  the window's reader holds (the report reads requests, and gpu_samples when there are any):")
        for table, (n, size) in win["files"].items():
            all_n, all_size = everything[table]
            print(f"  {table}: {n} of {all_n} files, {size / 1e6:,.0f} of {all_size / 1e6:,.0f} MB")
    print(f"peak RSS {peak_rss_mb():,.0f} MB")


if __name__ == "__main__":
    main()
